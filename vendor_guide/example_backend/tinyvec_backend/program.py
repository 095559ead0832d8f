"""From glowsdk's low-level IR to a TinyVec-1 program, and the functional simulator that runs it.

glowsdk hands `compile` a scheduled, lowered graph; `build_program` turns it
into the low-level IR plus a static memory plan, the same for every IR backend.
Loading it is a walk over the instructions:

* `allocactivation` / `deallocactivation` only mark lifetimes: the allocator has
  already placed every buffer, so they cost nothing here;
* a `tensorview` is a typed window into another buffer: `plan.address(view)`
  resolves it to its base buffer's region and offset plus the view's own offset;
* `copy` moves bytes (a Save into an output, or a buffer the optimiser split);
* every other instruction is a primitive: its `@out` operands are the
  destinations, its `@in` operands the sources, in the node record's order, and
  its attributes are the node's (`instr.strides`, `instr.pads`, ...).

The device memory is the plan's three regions (constants, placeholders,
activations), and every operand is a numpy view at its planned offset, so the
simulator computes in exactly the bytes the allocator laid out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from glowsdk.compiler.backend import CompiledFunction
from glowsdk.compiler.ir.function import Instruction, Value
from glowsdk.compiler.ir.instructions import OperandKind
from glowsdk.compiler.ir.program import build_program
from glowsdk.compiler.passes.manager import PassManager
from glowsdk.errors import InputError, UnsupportedError
from glowsdk.graph.function import Function
from glowsdk.graph.inputs import check_input
from glowsdk.graph.types import Type

from .kernels import KERNELS

REGIONS = ("constants", "placeholders", "activations")
LIFETIME_MARKERS = ("AllocActivation", "DeallocActivation", "TensorView")


@dataclass(frozen=True)
class Operand:
    """Where an operand's bytes are: a region, a byte offset, and the type to read them as."""

    region: int
    offset: int
    type: Type

    def view(self, memory: list[bytearray]) -> np.ndarray:
        if self.type.nbytes == 0:
            return np.empty(self.type.shape, self.type.dtype)
        return np.ndarray(self.type.shape, self.type.dtype, buffer=memory[self.region], offset=self.offset)


@dataclass(frozen=True)
class Op:
    """One TinyVec-1 operation: a kernel (None for a copy) with its destination and sources."""

    instr: Instruction
    out: Operand
    sources: tuple[Operand | None, ...]


class TinyVecFunction(CompiledFunction):
    """A function loaded on the TinyVec-1 simulator; `cycles` counts the last run."""

    def __init__(self, function: Function, passes: PassManager | None, clock_hz: float, lanes: int) -> None:
        super().__init__(function)
        self.program = build_program(function, passes=passes)
        self.clock_hz, self.lanes, self.cycles = clock_hz, lanes, 0
        plan = self.program.plan
        self.sizes = [plan.region_bytes(region) for region in REGIONS]
        weights = self.program.ir.weights.values()
        self.constants = {w.name: (self._operand(w), w.value) for w in weights if w.role == "constant"}
        self.placeholders = {w.name: self._operand(w) for w in weights if w.role == "input"}
        self.results = {w.name: self._operand(w) for w in weights if w.role == "output"}
        self.ops = [self._load(instr) for instr in self.program.ir if instr.kind not in LIFETIME_MARKERS]
        self._inputs = {p.name: p for p in function.input_placeholders()}

    def _operand(self, value: Value) -> Operand:
        region, offset = self.program.plan.address(value)
        return Operand(REGIONS.index(region), offset, value.type)

    def _load(self, instr: Instruction) -> Op:
        if instr.kind != "Copy" and instr.kind not in KERNELS:
            raise UnsupportedError(f"tinyvec: no kernel for {instr.kind} (instruction '{instr.name}')")
        dests = [v for v, direction in instr.operand_pairs() if direction is OperandKind.OUT]
        sources = tuple(None if v is None else self._operand(v) for v in instr.inputs)
        return Op(instr, self._operand(dests[0]), sources)

    @property
    def seconds(self) -> float:
        """The last run's time on the chip's clock."""
        return self.cycles / self.clock_hz

    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = sorted(set(self._inputs) - set(inputs))
        if missing:
            raise InputError(f"tinyvec: missing input(s) {', '.join(missing)}")
        memory = [bytearray(size) for size in self.sizes]
        for operand, value in self.constants.values():
            np.copyto(operand.view(memory), value)
        for name, operand in self.placeholders.items():
            np.copyto(operand.view(memory), check_input(self._inputs[name], inputs[name]))
        self.cycles = 0
        with np.errstate(all="ignore"):
            for op in self.ops:
                out = op.out.view(memory)
                sources = [None if s is None else s.view(memory) for s in op.sources]
                if op.instr.kind == "Copy":
                    np.copyto(out, sources[0])
                    self.cycles += -(-out.nbytes // (4 * self.lanes))
                else:
                    self.cycles += KERNELS[op.instr.kind](op.instr, out, *sources)
        return {name: np.array(operand.view(memory), copy=True) for name, operand in self.results.items()}
