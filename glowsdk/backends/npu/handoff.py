"""The next layer's first product across the barrier: the array starts it while the layer before drains.

A layer ends with its last tile's vector work and stores, the array idle, then the barrier (emitter.py); only
after it does the next layer's first MATMUL start. Where the layer before loaded both of that product's
operands, its weight block and its input rows (prefetch.py: each signals PREFETCH; or rows the layer before kept in
the scratchpad for it, kept_inputs.py), the product reads nothing
the barrier orders: it is moved in front of the barrier, so the array computes it while the layer before's last
tiles are requantized and stored. What it writes, accumulator rows of its tile, the layer before may still read
(its tiles' rows and its bias row may lie at the same addresses; accplace.py places them where it reads them
least late): a configuration op of the vector engine right after the last of the layer before's instructions
touching those rows (all of them vector work, or the array's, which runs in order) signals HANDOFF, and a
restated CONFIG_MATMUL waits for it before the product.
"""
from __future__ import annotations

from dataclasses import replace

from isa.config import ArchConfig
from isa.program import extents, with_registers

from .emitter import Emitter, Sync
from .gemm import GemmLayer
from .pipeline import CLAMP_RESET, PREFETCH

HANDOFF = 28
"""Signalled once by a configuration op of the layer before's vector engine right after the instruction accplace.py
finds last touching the moved product's accumulator words; waited on before the moved product."""


def can_hand_off(body: object, config: ArchConfig) -> bool:
    """Whether a layer's first product reads only what the layer before loaded for it (its weight block and its
    input rows) or kept for it (its input rows: kept_inputs.py), so that it may run before the barrier."""
    return isinstance(body, GemmLayer) and body.prefetched is not None \
        and (body.prefetched_input is not None or body.kept_input is not None) \
        and config.semaphores > HANDOFF


def _product(program: list, start: int) -> tuple[int, int]:
    """[at, stop): the first product of the layer from `start`: its configuration, which waits PREFETCH, and the
    products after it that wait for nothing else."""
    at = next(i for i in range(start, len(program)) if program[i].mnemonic == "CONFIG_MATMUL")
    config_op = program[at]
    if program[start - 1].mnemonic != "NOP" or config_op.wait_sem != PREFETCH or not config_op.wait_count:
        raise AssertionError("a handed-off product follows the barrier and waits for the prefetched operands")
    stop = at + 1
    while stop < len(program) and program[stop].mnemonic == "MATMUL" and not program[stop].wait_count:
        stop += 1
    if stop == at + 1:
        raise AssertionError("a handed-off configuration is followed by the product it configures")
    return at, stop


def hand_off(em: Emitter, start: int, body: GemmLayer, last: int | None, config: ArchConfig) -> None:
    """Move the first product of `body`'s layer, emitted from `start` (`_product`), in front of the barrier closing
    the layer before, behind the HANDOFF handshake signalled after instruction `last` (`accplace.place`; None: no
    handshake, the layer before touches none of its accumulator words); fix both layers' debug ranges."""
    program = em.instructions
    barrier = start - 1
    at, stop = _product(program, start)
    config_op, moved = program[at], program[at:stop]
    written = [e for instr, registers in with_registers(moved, config) for e in extents(instr, registers)
               if e.memory == "acc"]
    if (min(e.start for e in written), max(e.stop for e in written)) != body.first_product():
        raise AssertionError("a handed-off product writes the accumulator words its handshake guards")
    before, mine = em.debug[-2], em.debug[-1]
    lead, shift = list(moved), 0
    if last is not None:  # (before the barrier and the moved product: both shift by one)
        lead.insert(0, config_op.replace(wait_sem=HANDOFF, wait_count=1))
        signal = Emitter()
        signal.emit(CLAMP_RESET, Sync(signal=HANDOFF, signal_count=1))
        program[last + 1:last + 1] = signal.instructions
        shift = 1
    del program[at + shift:stop + shift]
    program[barrier + shift:barrier + shift] = lead
    gained = len(lead) + shift
    em.debug[-2:] = [replace(before, stop=before.stop + gained),
                     replace(mine, start=mine.start + gained, stop=mine.stop + gained - len(moved))]
