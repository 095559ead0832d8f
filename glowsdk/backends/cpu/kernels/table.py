"""The libjit table: one record per instruction kind the CPU backend compiles (paper 5.1).

A record names the kind, the element kinds its kernel handles, the builder that
emits a specialised kernel for one step, an optional `accepts` rule for what the
element kinds alone do not say (Pow's exponent of the base's kind), and, for an
element-wise kind, its `scalar` semantics: one element of the result from one
element of each source; for a compute kind, `epilogue` says whether an
instruction's kernel can apply stacked element-wise instructions as it stores
its result (epilogue.py). Operator stacking composes `scalar`s, so every
element-wise kind is stackable with every other by being in this table. The
backend's primitives are derived from here: a kind or element kind missing from
the table is reported unsupported, never computed wrongly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.module import KernelBuilder, KernelContext

Scalar = Callable[[KernelContext, Any, Sequence[ir.Value]], ir.Value]
"""(context, instruction, source values) -> the result value, for one element."""


@dataclass(frozen=True)
class KernelRecord:
    """How the CPU backend compiles one instruction kind."""

    kind: str
    elems: frozenset[ElemKind]
    build: KernelBuilder
    accepts: Callable[[Any], bool] | None = None
    scalar: Scalar | None = None
    epilogue: Callable[[Any], bool] | None = None
    epilogue_rows: bool = False
    """Whether each vector the kernel's store hands its epilogue lies within one row of the result's
    last dim (a MatMul's C), so an epilogue source of one value per column (a bias) is read there."""

    def takes_epilogue(self, instr: Any) -> bool:
        """Whether `instr`'s kernel applies stacked element-wise instructions as it stores."""
        return self.epilogue is not None and self.epilogue(instr)

    def supports(self, node: Any) -> bool:
        """Whether the kernel handles `node` (a graph node or an instruction) beyond its element kinds."""
        return self.accepts is None or self.accepts(node)


KERNELS: dict[str, KernelRecord] = {}
"""Every kind the CPU backend compiles, by kind name (`Copy` included)."""


def register(kind: str, elems: frozenset[ElemKind], build: KernelBuilder, *,
             accepts: Callable[[Any], bool] | None = None, scalar: Scalar | None = None,
             epilogue: Callable[[Any], bool] | None = None, epilogue_rows: bool = False) -> None:
    """Add the record of `kind`; a kind registered twice is a bug."""
    if kind in KERNELS:
        raise ValueError(f"cpu kernel for {kind} is registered twice")
    KERNELS[kind] = KernelRecord(kind, frozenset(elems), build, accepts, scalar, epilogue, epilogue_rows)
