"""The Partitioner (paper 6.1): a network into sub-networks, by backend support, then device memory.

1. Support. The network is lowered and quantized for the NPU exactly as compiling it for the NPU
   would (the compile pipeline's "quantized" stage). Each node then goes to the NPU if the NPU runs
   it in integers, else to the CPU; a conversion (Quantize, Dequantize) goes with its integer side.
   A node's stage is the largest stage of its producers, plus one where the device kind changes;
   nodes of one kind and stage form one part. Every edge goes to the same or a later stage, so the
   parts form a DAG, and consecutive NPU work is never cut without need.
2. Memory. An NPU part whose binary needs more DRAM than the largest NPU heap is cut in two along
   its schedule, at the point that moves the fewest bytes between the halves among the points
   splitting its weights between 1/4 and 3/4 (communication cost), and the halves are tried again.
   A single node that fits no device is refused, naming it and the sizes.
Without NPU devices the float network is one CPU part.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..compiler.backend import Backend, CompileOptions
from ..compiler.partition.cut import Piece, cut
from ..compiler.partition.placement import TARGET, parts_of, supported_sides
from ..compiler.pipeline import compile_function
from ..errors import GlowError, UnsupportedOpsError
from ..graph.function import Function
from ..graph.node import Constant, Node, Storage
from ..graph.nodes.core import Save
from ..graph.types import ElemKind
from ..quantization.convert import QuantizationConfig

NPU, CPU = "npu", "cpu"
CONVERSIONS = ("Quantize", "Dequantize")
BORDER_KINDS = (ElemKind.QINT8, ElemKind.FLOAT32)
"""What an NPU partition can hand to another: int8 activations (dequantized on the way) and floats."""


class NetworkRefused(GlowError):
    """A network the host cannot place: a part fits no device; the message says which and why."""


@dataclass
class Partition:
    """One sub-network: the device kind it runs on, its function, and what it reads and writes."""

    index: int
    kind: str
    function: Function
    inputs: list[str]
    outputs: list[str]
    memory_bytes: int = 0
    """Device memory it needs (the NPU binary's placed regions; the CPU's weights)."""
    artefact: object = None
    """What the provisioner loads: the NPU binary, or the CPU's compiled function."""
    backend: str = ""
    depends: set[int] = field(default_factory=set)
    part: int = 0
    """Its number in the partitioner's node assignment (partitions are renumbered in topological order)."""

    @property
    def ops(self) -> dict[str, int]:
        return {k: n for k, n in self.function.count_kinds().items()
                if k != "Save" and (k not in CONVERSIONS or self.kind == CPU)}


@dataclass
class PartitionPlan:
    """A network cut into partitions, in a topological order; `graph` is the function they compute together."""

    network: str
    graph: Function
    partitions: list[Partition]

    def border_bytes(self, partition: Partition) -> int:
        """Bytes of float32 tensors it receives from other partitions (the communication it costs)."""
        produced = {name for p in self.partitions if p is not partition for name in p.outputs}
        types = {ph.name: ph.type for ph in partition.function.input_placeholders()}
        return sum(4 * int(np.prod(types[n].shape)) for n in partition.inputs if n in produced)


def quantized_graph(function: Function, quantization: QuantizationConfig, npu: Backend) -> Function:
    """`function` lowered and quantized for `npu`, as the compile pipeline makes it before compiling."""
    captured: list[Function] = []

    def keep(stage: str, fn: Function) -> None:
        if stage == "quantized":
            captured.append(fn.module.clone().functions[fn.name])

    try:
        compile_function(function, npu, CompileOptions(), on_stage=keep, quantization=quantization)
    except UnsupportedOpsError:
        if not captured:
            raise
    return captured[0]


def device_kinds(graph: Function, npu: Backend) -> dict[int, str]:
    """id(node) -> NPU or CPU for every compute node (not storage, not Save): the compiler's support sides."""
    return {i: NPU if side == TARGET else CPU for i, side in supported_sides(graph, npu).items()}


def by_support(graph: Function, kinds: dict[int, str]) -> tuple[dict[int, int], list[str]]:
    """The support-driven parts: id(node) -> part, and each part's kind (the compiler's stage rule)."""
    return parts_of(graph, kinds)


def _weight_bytes(node: Node, seen: set[int]) -> int:
    total = 0
    for v in node.present_inputs():
        if isinstance(v.node, Constant) and id(v.node) not in seen:
            seen.add(id(v.node))
            total += v.node.value.nbytes
    return total


def split_point(graph: Function, assignment: dict[int, int], part: int) -> list[Node] | None:
    """The nodes of the first half of `part` (None if it cannot be cut): weights split between 1/4 and 3/4,
    and the fewest bytes crossing the cut, among the cuts where only int8 or float values cross."""
    nodes = [n for n in graph.nodes if assignment.get(id(n)) == part]
    if len(nodes) < 2:
        return None
    seen: set[int] = set()
    weights = np.cumsum([_weight_bytes(n, seen) for n in nodes])
    total = max(int(weights[-1]), 1)
    best = None
    for k in range(1, len(nodes)):
        head = {id(n) for n in nodes[:k]}
        crossing = {(id(v.node), v.index): v.type
                    for n in nodes[k:] for v in n.present_inputs() if id(v.node) in head}
        if all(n.kind in CONVERSIONS for n in nodes[:k]) or all(n.kind in CONVERSIONS for n in nodes[k:]):
            continue   # a half that only converts would compute nothing
        if any(t.elem not in BORDER_KINDS for t in crossing.values()):
            continue   # an int32 accumulator cannot leave the NPU: cut only where int8 (or float) flows
        share = weights[k - 1] / total
        key = (not 0.25 <= share <= 0.75, sum(t.nbytes for t in crossing.values()), abs(share - 0.5))
        if best is None or key < best[0]:
            best = (key, k)
    return None if best is None else nodes[:best[1]]


def ordered(pieces: list[Piece], kinds: list[str]) -> list[Partition]:
    """Partitions in a topological order of the border edges, numbered in that order."""
    producer = {name: p.index for p in pieces for name in p.outputs}
    deps = {p.index: {producer[n] for n in p.inputs if n in producer} for p in pieces}
    done: list[int] = []
    while len(done) < len(pieces):
        ready = min(i for i in deps if i not in done and deps[i] <= set(done))
        done.append(ready)
    number = {old: new for new, old in enumerate(done)}
    return [Partition(number[i], kinds[i], pieces[i].function, pieces[i].inputs, pieces[i].outputs,
                      depends={number[d] for d in deps[i]}, part=i) for i in done]


def partition(name: str, function: Function, quantization: QuantizationConfig | None, npu: Backend | None,
              fit: Callable[[Partition], int | None]) -> PartitionPlan:
    """Cut `function` for NPU devices (when `npu` is given) and the CPU.

    `fit(partition)` compiles a partition into its artefact and returns None if some device can hold
    it, else the largest capacity there is (the partition is then split, or refused when it is one node).
    """
    if npu is None:
        graph = function
        assignment, kinds = {id(n): 0 for n in graph.nodes if not isinstance(n, (Storage, Save))}, [CPU]
    else:
        graph = quantized_graph(function, quantization, npu)
        assignment, kinds = by_support(graph, device_kinds(graph, npu))
    while True:
        partitions = ordered(cut(graph, assignment, len(kinds)), kinds)
        too_big = next(((p, cap) for p in partitions if (cap := fit(p)) is not None), None)
        if too_big is None:
            return PartitionPlan(name, graph, partitions)
        part, capacity = too_big
        head = split_point(graph, assignment, part.part) if part.kind == NPU else None
        if head is None:
            raise NetworkRefused(f"network '{name}': partition {part.index} ({_describe(part)}) needs "
                                 f"{part.memory_bytes} bytes of {part.kind.upper()} memory, and the largest "
                                 f"{part.kind.upper()} device holds {capacity}")
        kinds.append(part.kind)
        for node in head:
            assignment[id(node)] = len(kinds) - 1


def _describe(part: Partition) -> str:
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in part.ops.items()) or "no ops"

