"""Passes and pass pipelines (paper 3.2, 5.3; xDSL's ModulePass, Glow's FunctionPasses).

A pass is a small named object whose `run(function)` returns whether it changed
anything. A pipeline is data: a named, printable list of entries, each a pass name
and a mode ("once", or "fixpoint" to repeat until nothing changes). The manager
verifies the function after every pass that changed it (naming the pass that
broke it; a pass that changed nothing leaves the function as it was verified,
and a verification costs as much as most passes) and can dump the function
before or after any pass.
"""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Iterable

from ...errors import GlowError, GraphError
from ...graph.function import Function

MAX_FIXPOINT_ROUNDS = 20


class Pass(ABC):
    """One transformation of a function (a graph Function, or an IRFunction for IR passes)."""

    name: ClassVar[str]

    @abstractmethod
    def run(self, function) -> bool:
        """Transform `function` in place; return whether anything changed."""


class PassRegistry(dict):
    """Passes by name; graph passes and IR passes each have one."""

    def register(self, cls: type[Pass]) -> type[Pass]:
        """Class decorator: make a pass available to pipelines by its `name`."""
        if cls.name in self:
            raise ValueError(f"pass '{cls.name}' is registered twice")
        self[cls.name] = cls
        return cls


PASSES = PassRegistry()
register_pass = PASSES.register


@dataclass(frozen=True)
class Entry:
    """One step of a pipeline."""

    pass_name: str
    mode: str = "once"
    why: str = ""

    def __post_init__(self) -> None:
        if self.mode not in ("once", "fixpoint"):
            raise ValueError(f"pipeline mode must be 'once' or 'fixpoint', got '{self.mode}'")


@dataclass
class Pipeline:
    """A named list of pipeline entries."""

    name: str
    entries: list[Entry]

    def format(self) -> str:
        lines = [f"pipeline {self.name}:"]
        for i, e in enumerate(self.entries):
            lines.append(f"  {i + 1:2d}. {e.pass_name:<28} {e.mode:<9} {e.why}")
        return "\n".join(lines)

    def pass_names(self) -> list[str]:
        return [e.pass_name for e in self.entries]


@dataclass
class PassRun:
    """What one pipeline entry did."""

    pass_name: str
    changed: bool
    rounds: int
    seconds: float
    nodes_after: int


@dataclass
class PassManager:
    """Runs pipelines with verification and dumps."""

    verify: bool = True
    dump_before: set[str] = field(default_factory=set)
    dump_after: set[str] = field(default_factory=set)
    dump: Callable[[str, Function], None] | None = None
    registry: PassRegistry = field(default_factory=lambda: PASSES)

    def run(self, pipeline: Pipeline, function) -> list[PassRun]:
        """Run `pipeline` on `function` (anything with `verify()` and `len(function.nodes)`-like size)."""
        runs = []
        for entry in pipeline.entries:
            if entry.pass_name not in self.registry:
                raise GlowError(f"pipeline {pipeline.name}: unknown pass '{entry.pass_name}'")
            the_pass = self.registry[entry.pass_name]()
            if entry.pass_name in self.dump_before and self.dump:
                self.dump(f"before {entry.pass_name}", function)
            start = time.perf_counter()
            changed, rounds = False, 0
            while True:
                rounds += 1
                step_changed = the_pass.run(function)
                changed |= step_changed
                if self.verify and step_changed:
                    try:
                        function.verify()
                    except GraphError as err:
                        raise GraphError(f"after pass '{entry.pass_name}': {err}") from None
                if entry.mode == "once" or not step_changed or rounds >= MAX_FIXPOINT_ROUNDS:
                    break
            runs.append(PassRun(entry.pass_name, changed, rounds, time.perf_counter() - start, len(function)))
            if entry.pass_name in self.dump_after and self.dump:
                self.dump(f"after {entry.pass_name}", function)
        return runs


def run_passes(function: Function, names: Iterable[str]) -> bool:
    """Run the named passes once each, verifying after each (a convenience for tests)."""
    pipeline = Pipeline("adhoc", [Entry(n) for n in names])
    return any(r.changed for r in PassManager().run(pipeline, function))
