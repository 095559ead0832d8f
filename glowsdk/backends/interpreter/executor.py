"""Running a Program's instructions on flat byte buffers at the allocated offsets.

Memory is what the allocator planned and nothing else: one constant region,
filled once, one placeholder region and one activation region per run. Every
weight, activation and tensorview is a numpy view into its region at its planned
byte offset (a view at its base's offset plus its own), and every compute
instruction runs the reference kernel of its kind on the views of its sources
and writes the results through the views of its destinations. No value lives in
an array of its own, so an overlap the allocator or an IR pass got wrong shows up
as wrong numbers, as it would on a device.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ...compiler.ir.function import Instruction, Value
from ...compiler.ir.instructions import OperandKind
from ...errors import UnsupportedError
from ...graph.types import Type
from ...reference import kernels  # noqa: F401  (registers the kernels)
from ...reference.registry import KERNELS, Kernel, group_variadic, kernel_results

if TYPE_CHECKING:
    from ...compiler.ir.program import Program

REGIONS = ("constants", "placeholders", "activations")
_STRUCTURAL = ("AllocActivation", "DeallocActivation", "TensorView")

Buffers = Sequence[bytearray | memoryview]
Arg = int | None | list[int]
"""A kernel argument: a value's index, None for an absent operand, a list for a variadic one."""


@dataclass(frozen=True)
class _Slot:
    """Where a value's bytes are: a region (index into REGIONS), a byte offset, a type."""

    region: int
    offset: int
    type: Type

    def view(self, buffers: Buffers) -> np.ndarray:
        """A numpy view of the value's bytes in `buffers[self.region]`."""
        if self.type.nbytes == 0:  # an empty tensor owns no bytes, possibly at the region's end
            return np.empty(self.type.shape, self.type.dtype)
        return np.ndarray(self.type.shape, self.type.dtype, buffer=buffers[self.region], offset=self.offset)


@dataclass(frozen=True)
class _Step:
    """One instruction to run: a kernel (None for a copy) over value indices."""

    instr: Instruction
    kernel: Kernel | None
    dests: tuple[int, ...]
    args: tuple[Arg, ...]


class ProgramRunner:
    """Executes a Program; build once, `run` many times."""

    def __init__(self, program: Program) -> None:
        plan = program.plan
        self.program = program
        self._sizes = (plan.constant_bytes, plan.placeholder_bytes, plan.activation_bytes)
        self._index: dict[int, int] = {}
        self._slots: list[_Slot] = []
        for weight in program.ir.weights.values():
            self._bind(weight)
        for instr in program.ir.instructions:
            if instr.kind in ("AllocActivation", "TensorView"):
                self._bind(instr)
        self._constants = self._fill_constants()
        self._steps = [self._step(i) for i in program.ir.instructions if i.kind not in _STRUCTURAL]
        weights = program.ir.weights.values()
        self._inputs = {w.name: self._index[id(w)] for w in weights if w.role == "input"}
        self._outputs = {w.name: self._index[id(w)] for w in weights if w.role == "output"}

    def _bind(self, value: Value) -> None:
        region, offset = self.program.plan.address(value)
        self._index[id(value)] = len(self._slots)
        self._slots.append(_Slot(REGIONS.index(region), offset, value.type))

    def _fill_constants(self) -> memoryview:
        """The constant region, every constant's data at its offset (read-only from here on)."""
        regions = (bytearray(self._sizes[0]),)
        for weight in self.program.ir.weights.values():
            if weight.role == "constant":
                if weight.value is None:
                    raise UnsupportedError(f"constant weight %{weight.name} has no data")
                np.copyto(self._slots[self._index[id(weight)]].view(regions), weight.value)
        return memoryview(regions[0]).toreadonly()

    def _step(self, instr: Instruction) -> _Step:
        dests = tuple(self._index[id(v)] for v, d in instr.operand_pairs() if d is OperandKind.OUT)
        if instr.kind == "Copy":
            return _Step(instr, None, dests, (self._index[id(instr.operands[1])],))
        kernel = KERNELS.get(instr.kind)
        if kernel is None:
            raise UnsupportedError(f"instruction '{instr.name}': no reference kernel for {instr.kind}")
        args: list[Arg] = [None if v is None else self._index[id(v)] for v in instr.inputs]
        return _Step(instr, kernel, dests, tuple(group_variadic(instr.spec.node.operands, args)))

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on checked input arrays (by weight name); fresh output arrays by name."""
        buffers = (self._constants, bytearray(self._sizes[1]), bytearray(self._sizes[2]))
        views = [slot.view(buffers) for slot in self._slots]
        for name, index in self._inputs.items():
            np.copyto(views[index], inputs[name])
        with np.errstate(all="ignore"):
            for step in self._steps:
                _execute(step, views)
        return {name: np.array(views[index], copy=True) for name, index in self._outputs.items()}


def _argument(arg: Arg, views: list[np.ndarray]) -> np.ndarray | list[np.ndarray] | None:
    if arg is None:
        return None
    if isinstance(arg, list):
        return [views[i] for i in arg]
    return views[arg]


def _execute(step: _Step, views: list[np.ndarray]) -> None:
    """Run one copy or kernel, writing through the destination views."""
    if step.kernel is None:
        np.copyto(views[step.dests[0]], views[step.args[0]])
        return
    produced = step.kernel(step.instr, *(_argument(a, views) for a in step.args))
    for index, result in zip(step.dests, kernel_results(produced, len(step.dests), step.instr.kind)):
        dest = views[index]
        if result.shape != dest.shape:
            raise AssertionError(f"{step.instr.kind} '{step.instr.name}': kernel produced shape "
                                 f"{result.shape}, the destination is {dest.shape}")
        np.copyto(dest, result, casting="unsafe")
