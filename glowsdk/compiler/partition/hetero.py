"""One compiled artifact over several devices: the target's partitions and the fallback's, run in order.

`compile_partitioned` cuts a placed graph (placement.py) into sub-functions (cut.py) and compiles
each for its device: target parts through the target's post-lowering transform, schedule and
compile; fallback parts through the whole pipeline of the fallback backend (or, for a part even the
fallback refuses, of the interpreter, which runs every primitive). `PartitionedFunction` executes them
in a topological order, handing border tensors from one to the next, and keeps each part's share
of the work and its time of the last run for the partition report.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from ...errors import UnsupportedError, UnsupportedOpsError
from ...graph.function import Function
from ...graph.node import Origin
from ...graph.serialize import function_to_data
from ..backend import Backend, CompiledFunction
from . import package
from .cost import Work
from .cut import cut
from .placement import TARGET, Placement

if TYPE_CHECKING:
    from ..schedule import ScheduleReport

CompileTarget = Callable[[Function], CompiledFunction]
"""Compiles one target part (transform, schedule, compile), as the pipeline does for a whole graph."""
CompileFallback = Callable[[Function, Backend], CompiledFunction]
"""Compiles one fallback part for a backend through the whole pipeline."""


@dataclass
class CompiledPartition:
    """One part of the network, compiled for its device."""

    index: int
    side: str
    backend: str
    compiled: CompiledFunction
    inputs: list[str]
    outputs: list[str]
    work: Work
    border_bytes: int
    estimated_seconds: float
    origins: list[Origin] = field(default_factory=list)
    nodes: int = 0
    last_seconds: float = 0.0
    record: tuple[dict, dict] | None = None
    """A host partition as data (glowsdk.graph.serialize), as it was cut: what `save` writes."""


class PartitionedFunction(CompiledFunction):
    """A network compiled for a target and its fallback device; runs end to end as one function."""

    def __init__(self, function: Function, target: str, fallback: str, partitions: list[CompiledPartition],
                 moved_back: int = 0) -> None:
        super().__init__(function)
        self.function = function  # the whole graph the parts compute together, for the reference evaluator
        self.target = target
        self.fallback = fallback
        self.partitions = partitions
        self.moved_back = moved_back
        self.schedule_report: ScheduleReport | None = None

    @property
    def total_macs(self) -> int:
        return sum(p.work.macs for p in self.partitions)

    @property
    def target_macs(self) -> int:
        return sum(p.work.macs for p in self.partitions if p.side == TARGET)

    def device_partitions(self) -> list[CompiledPartition]:
        return [p for p in self.partitions if p.side == TARGET]

    def report(self, page: bool, title: str) -> str:
        """Each of the target's partitions' own report, in order; a page shows one compiled function only."""
        if page:
            raise UnsupportedError(f"--report html: target {self.target} did not compile the whole model as one "
                                   f"(a partitioned model: use --report text)")
        parts = self.device_partitions()
        if not parts:
            raise UnsupportedError(f"--report: no part of the model runs on target {self.target}")
        return "\n\n".join(f"== {self.target} partition {p.index} ==\n{p.compiled.report(False, title)}"
                           for p in parts)

    def save(self, path: str) -> None:
        """One file with every partition (package.py): the target's as it writes them, the host's as data."""
        members: dict[str, bytes] = {}
        entries = []
        for p in self.partitions:
            if p.side == TARGET:
                if type(p.compiled).save is CompiledFunction.save:
                    raise UnsupportedError(f"-o {path}: target {self.target} compiles to no file of its own, so "
                                           f"its partitions cannot be written (glowsdk run runs the model)")
                own = package.target_member(p.index, p.compiled.save)
            else:
                own = package.host_members(p.index, *p.record)
            members.update(own)
            entries.append({"index": p.index, "device": self.target if p.side == TARGET else "host",
                            "backend": p.backend, "inputs": p.inputs, "outputs": p.outputs, "macs": p.work.macs,
                            "border_bytes": p.border_bytes, "members": list(own)})
        manifest = {"format": package.FORMAT, "version": package.VERSION, "target": self.target,
                    "fallback": self.fallback,
                    "inputs": package.types_json({i.name: i.type for i in self.inputs}),
                    "outputs": package.types_json({o.name: o.type for o in self.outputs}),
                    "partitions": entries}
        try:
            package.write_package(path, manifest, members)
        except OSError as err:
            raise UnsupportedError(f"-o {path}: cannot write ({err.strerror or err})") from None

    def describe(self) -> list[dict]:
        """Each partition as a JSON-ready row: device, backend, nodes, model nodes, MACs, border bytes, times."""
        total = max(self.total_macs, 1)
        return [{"partition": p.index, "device": self.target if p.side == TARGET else "host",
                 "backend": p.backend, "nodes": p.nodes, "model_nodes": len(p.origins),
                 "first_model_nodes": [str(o) for o in p.origins[:3]], "macs": p.work.macs,
                 "mac_share": p.work.macs / total, "border_bytes": p.border_bytes,
                 "estimated_seconds": p.estimated_seconds, "last_run_seconds": p.last_seconds}
                for p in self.partitions]

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        values: dict[str, np.ndarray] = dict(inputs)
        for part in self.partitions:
            start = time.perf_counter()
            values.update(part.compiled.execute({name: values[name] for name in part.inputs}))
            part.last_seconds = time.perf_counter() - start
        return {o.name: values[o.name] for o in self.outputs}


def compile_partitioned(graph: Function, placement: Placement, target: Backend, fallbacks: list[Backend],
                        compile_target: CompileTarget, compile_fallback: CompileFallback) -> PartitionedFunction:
    """Cut `graph` along `placement` and compile every part for its device; a fallback part goes to the
    first of `fallbacks` that runs all of it."""
    pieces = cut(graph, placement.assignment, len(placement.part_sides))
    partitions = []
    for number, index in enumerate(_topological(pieces)):
        piece, cost = pieces[index], placement.costs[index]
        side = placement.part_sides[index]
        record = None
        if side == TARGET:
            compiled, backend = compile_target(piece.function), target.name
        else:
            record = function_to_data(piece.function)
            compiled, backend = _compile_host(piece.function, fallbacks, compile_fallback)
        seconds = cost.target_seconds if side == TARGET else cost.fallback_seconds
        origins = list(dict.fromkeys(n.origin for n in cost.nodes if n.origin is not None))
        partitions.append(CompiledPartition(number, side, backend, compiled, piece.inputs, piece.outputs, cost.work,
                                            cost.border_bytes, seconds, origins, len(cost.nodes), record=record))
    return PartitionedFunction(graph, target.name, fallbacks[0].name, partitions, placement.moved_back)


def _compile_host(function: Function, fallbacks: list[Backend],
                  compile_fallback: CompileFallback) -> tuple[CompiledFunction, str]:
    for k, backend in enumerate(fallbacks):
        try:
            return compile_fallback(function, backend), backend.name
        except UnsupportedOpsError:
            if k == len(fallbacks) - 1:
                raise
    raise AssertionError("no fallback backend given")


def _topological(pieces: list) -> list[int]:
    """Piece indices in an order where every border tensor is produced before it is read."""
    producer = {name: p.index for p in pieces for name in p.outputs}
    needs = {p.index: {producer[n] for n in p.inputs if n in producer} for p in pieces}
    done: list[int] = []
    while len(done) < len(pieces):
        done.append(min(i for i in needs if i not in done and needs[i] <= set(done)))
    return done
