"""SRAM and DRAM access counts per instruction, by memory, direction and operand: what energy is made of.

Counts are bytes (accumulator words count 4). A MATMUL of P x K by K x N on an R x C array reads
its input once per column fold (ceil(N / C) times) and its weights once (weight-stationary) or
once per row fold (output-stationary, ceil(P / R) times); it writes the P x N int32 result once
per K fold (weight-stationary: partial sums go back to the accumulator) or once (output-
stationary), and reads it back for every write that adds to what is there (accumulate mode, or
a K fold after the first). A GMATMUL of G groups is G such products, each on its own block of
C div G columns. Other instructions touch exactly their extents. A LOAD writes the
SRAM with its DRAM bytes plus its padding; a DRAM read is a weight read when its address lies in
the binary's constants region.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterable

from isa.config import ArchConfig
from isa.sections import Region

from .steps import Step

OPERANDS = ("input", "weights", "output", "vector", "dma")
"""SRAM access kinds: the matrix engine's three operands, vector-engine traffic and DMA fills/drains."""


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def step_accesses(step: Step, config: ArchConfig, weights: Region | None) -> Counter:
    """Bytes by (memory, 'read'|'write', kind) for one instruction; memory is 'spad', 'acc' or 'dram'."""
    counts: Counter = Counter()
    i = step.instr
    if step.problem:
        return counts
    if i.mnemonic in ("MATMUL", "GMATMUL"):
        dataflow = step.registers["dataflow"]
        groups = i.groups if i.mnemonic == "GMATMUL" else 1
        col_folds, row_folds, k_folds = _ceil(i.n, config.array_cols // groups), _ceil(i.rows, config.array_rows), \
            _ceil(i.k, config.array_rows)
        counts["spad", "read", "input"] += groups * i.rows * i.k * col_folds
        counts["spad", "read", "weights"] += groups * i.k * i.n * (1 if dataflow == "ws" else row_folds)
        writes = k_folds if dataflow == "ws" else 1
        counts["acc", "write", "output"] += 4 * groups * i.rows * i.n * writes
        counts["acc", "read", "output"] += 4 * groups * i.rows * i.n * (writes - 1 + i.acc_mode)
        return counts
    if step.transfer is not None:
        moved = step.dram_bytes
        into_dram = step.transfer.into_dram
        kind = "weights" if weights is not None and not into_dram and weights.holds(i.dram, max(moved, 1)) \
            else "activations"
        counts["dram", "write" if into_dram else "read", kind] += moved
        for extent in step.extents:
            if extent.memory != "dram":
                size = (extent.stop - extent.start) * (4 if extent.memory == "acc" else 1)
                counts[extent.memory, "write" if extent.write else "read", "dma"] += \
                    min(size, moved + step.pad_bytes) if extent.write else min(size, moved)
        return counts
    for extent in step.extents:
        if extent.memory != "dram":
            size = (extent.stop - extent.start) * (4 if extent.memory == "acc" else 1)
            counts[extent.memory, "write" if extent.write else "read", "vector"] += size
    return counts


def total(counts: Iterable[Counter]) -> Counter:
    out: Counter = Counter()
    for c in counts:
        out.update(c)
    return out


def as_tree(counts: Counter) -> dict:
    """{memory: {direction: {kind: bytes}}} with only the non-zero entries, for JSON."""
    tree: dict = {}
    for (memory, direction, kind), value in sorted(counts.items()):
        if value:
            tree.setdefault(memory, {}).setdefault(direction, {})[kind] = int(value)
    return tree
