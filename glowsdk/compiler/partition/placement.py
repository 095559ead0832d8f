"""Placing a lowered graph's nodes on a target and its fallback device, by support and by cost.

1. Support, on the graph the target will see (lowered, constant-folded, quantized): a node goes to
   the target if the target runs it as it is (an integer-only target: with no float operand or
   result), else to the fallback. A Quantize or Dequantize goes with its integer side.
2. Parts. A node's stage is the largest stage of its producers, plus one where the side changes;
   the nodes of one side and stage form one part. Every edge runs to the same or a later stage, so
   the parts form a DAG, and independent branches of one side share a part (fewer, larger parts).
3. Cost. Each target part, taken one island (a connected group of target nodes) at a time so that
   unrelated work does not share a verdict, pays a launch and its border bytes over the target's
   link, and stays when the time it saves on the fallback is larger. The parts that do not pay go
   back to the fallback and the parts are formed again (stages shift, target parts may merge), until
   every target part pays for itself: a lone element-wise op between two fallback nodes never makes
   a round trip, and a recurrent cell cut into one part per time step pays a launch per step.
   Finally, target parts of one stage are merged (one launch for independent branches).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...graph.function import Function
from ...graph.node import Node, Storage
from ...graph.nodes.core import Save
from ...graph.types import ElemKind
from ..backend import Backend, DeviceInfo
from .cost import Work, node_bytes, node_macs, transfer_seconds

TARGET, FALLBACK = "target", "fallback"
CONVERSIONS = ("Quantize", "Dequantize")


def runs_on(backend: Backend, node: Node) -> bool:
    """Whether `backend` runs `node` as it is (an integer-only backend: with no float value)."""
    if not backend.is_op_supported(node):
        return False
    if backend.requires_quantization:
        return not any(t.elem.is_float for t in [*node.types, *(v.type for v in node.present_inputs())])
    return True


def compute_nodes(graph: Function) -> list[Node]:
    return [n for n in graph.nodes if not isinstance(n, (Storage, Save))]


def supported_sides(graph: Function, backend: Backend) -> dict[int, str]:
    """id(node) -> TARGET or FALLBACK for every compute node, by support alone."""
    if not backend.requires_quantization:
        return {id(n): TARGET if runs_on(backend, n) else FALLBACK for n in compute_nodes(graph)}
    sides = {id(n): TARGET if runs_on(backend, n) else FALLBACK
             for n in compute_nodes(graph) if n.kind not in CONVERSIONS}
    for node in graph.nodes:  # a Dequantize of integer target work runs on the target
        if node.kind == "Dequantize":
            producer = sides.get(id(node.input.node))
            ok = node.input.type.elem is ElemKind.QINT8 or backend.is_op_supported(node)  # a wide Softmax's int32
            sides[id(node)] = TARGET if producer == TARGET and ok else FALLBACK
    for node in reversed(graph.nodes):  # a Quantize feeding only target work runs on the target
        if node.kind == "Quantize":
            users = [sides.get(id(u)) for u in node.users if not isinstance(u, Save)]
            ok = users and all(s == TARGET for s in users) and node.type.elem is ElemKind.QINT8
            sides[id(node)] = TARGET if ok else FALLBACK
    return sides


def parts_of(graph: Function, sides: dict[int, str],
             split: dict[int, int] | None = None) -> tuple[dict[int, int], list[str]]:
    """The parts of a side assignment: id(node) -> part, and each part's side (in stage order).
    `split` (id -> group) keeps nodes of different groups apart within a stage."""
    stage: dict[int, int] = {}
    for node in graph.topo_order():
        if id(node) not in sides:
            continue
        producers = [v.node for v in node.present_inputs() if id(v.node) in sides]
        stage[id(node)] = max((stage[id(p)] + (sides[id(p)] != sides[id(node)]) for p in producers), default=0)
    group = split or {}
    key = {i: (stage[i], sides[i], group.get(i, -1)) for i in stage}
    keys = sorted(set(key.values()))
    number = {k: n for n, k in enumerate(keys)}
    return {i: number[key[i]] for i in stage}, [side for _, side, _ in keys]


@dataclass
class PartCost:
    """A part's work, the bytes crossing its border, and its estimated time on each side."""

    part: int
    side: str
    nodes: list[Node]
    work: Work
    border_bytes: int
    target_seconds: float
    fallback_seconds: float

    @property
    def gain(self) -> float:
        """Seconds saved by running this part on the target instead of the fallback."""
        return self.fallback_seconds - self.target_seconds


def part_costs(graph: Function, assignment: dict[int, int], sides: list[str], target: DeviceInfo,
               fallback: DeviceInfo) -> list[PartCost]:
    members: dict[int, list[Node]] = {k: [] for k in range(len(sides))}
    for node in compute_nodes(graph):
        members[assignment[id(node)]].append(node)
    border = dict.fromkeys(range(len(sides)), 0)
    crossed: set[tuple[int, int, int | None]] = set()  # (producer, result, user part): one transfer each
    for node in graph.nodes:
        if isinstance(node, Save):  # a network output returns to the host
            producer = assignment.get(id(node.input.node))
            if producer is not None:
                border[producer] += node.input.type.nbytes
            continue
        user = assignment.get(id(node))
        for value in node.present_inputs():
            producer = assignment.get(id(value.node))
            if producer is None or producer == user or (id(value.node), value.index, user) in crossed:
                continue
            crossed.add((id(value.node), value.index, user))
            border[producer] += value.type.nbytes
            if user is not None:
                border[user] += value.type.nbytes
    for node in graph.input_placeholders():  # network inputs reach a part over its device's link
        for user in node.users:
            if id(user) in assignment:
                border[assignment[id(user)]] += node.type.nbytes
    costs = []
    for part, side in enumerate(sides):
        work = Work()
        for node in members[part]:
            work += Work(node_macs(node), node_bytes(node))
        on_target = work.seconds(target) + transfer_seconds(target, border[part])
        costs.append(PartCost(part, side, members[part], work, border[part], on_target,
                              work.seconds(fallback) + transfer_seconds(fallback, border[part])))
    return costs


@dataclass
class Placement:
    """Each compute node's side and part, with the estimate that chose it."""

    sides: dict[int, str]
    assignment: dict[int, int]
    part_sides: list[str]
    costs: list[PartCost]
    unsupported: list[Node] = field(default_factory=list)
    moved_back: int = 0
    """Target parts the cost model returned to the fallback."""

    @property
    def split(self) -> bool:
        return any(side == FALLBACK for side in self.part_sides)


def islands(graph: Function, sides: dict[int, str]) -> dict[int, int]:
    """id(node) -> island for target nodes: the connected groups of target nodes, each one decision of
    the cost model (parts of one stage may join unrelated islands; their fates stay separate)."""
    parent: dict[int, int] = {i: i for i, side in sides.items() if side == TARGET}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for node in compute_nodes(graph):
        if id(node) in parent:
            for value in node.present_inputs():
                if id(value.node) in parent:
                    parent[root(id(value.node))] = root(id(node))
    return {i: root(i) for i in parent}


def place(graph: Function, backend: Backend, fallback: Backend) -> Placement:
    """Place `graph`'s nodes on `backend` or `fallback` (see the module docstring)."""
    sides = supported_sides(graph, backend)
    unsupported = [n for n in compute_nodes(graph) if sides[id(n)] == FALLBACK]
    target_info, fallback_info = backend.device_info(), fallback.device_info()
    moved = 0
    while unsupported:
        assignment, part_sides = parts_of(graph, sides, split=islands(graph, sides))
        costs = part_costs(graph, assignment, part_sides, target_info, fallback_info)
        losers = [c for c in costs if c.side == TARGET and c.gain <= 0]
        if not losers:
            break
        for loser in losers:  # moving one changes no other's border: each crossing edge stays crossing
            for node in loser.nodes:
                sides[id(node)] = FALLBACK
        moved += len(losers)
    assignment, part_sides = parts_of(graph, sides)
    costs = part_costs(graph, assignment, part_sides, target_info, fallback_info)
    return Placement(sides, assignment, part_sides, costs, unsupported, moved)
