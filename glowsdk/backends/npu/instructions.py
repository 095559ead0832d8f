"""Typed constructors of the NPU's instructions, generated from the rows of the ISA table (isa/table.py).

A layer lists its instructions before the pipeline gives them their semaphores (pipeline.py), as `Op`s built
by one constructor per row: `LOAD(dram=..., space="spad", sram=0, planes=1, rows=1, cols=64)`. The
constructor checks the keywords against the row's operand fields, so a misspelt or missing field fails where
the instruction is written, naming it; the emitter checks the values when it encodes the `Op`
(isa/encoding.py). Only a row's mnemonic, its fields' names and its doc are read: a field or a row the table
gains has its constructor with nothing written here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from isa.errors import IsaError
from isa.schema import FieldValue, InstrSpec
from isa.table import INSTRUCTIONS


@dataclass(frozen=True)
class Op:
    """One instruction without its semaphores: the mnemonic and its operand fields by name."""

    mnemonic: str
    fields: Mapping[str, FieldValue]

    @property
    def is_config(self) -> bool:
        """A CONFIG_* instruction: sets registers, moves and computes nothing."""
        return self.mnemonic.startswith("CONFIG")


def _constructor(spec: InstrSpec) -> Callable[..., Op]:
    """The constructor of `spec`'s row: keyword arguments named exactly as its operand fields."""
    names = tuple(f.name for f in spec.fields)
    expected = frozenset(names)

    def build(**fields: FieldValue) -> Op:
        if fields.keys() != expected:
            unknown = sorted(fields.keys() - expected)
            problem = f"unknown field '{unknown[0]}'" if unknown else \
                f"missing field '{next(n for n in names if n not in fields)}'"
            raise IsaError(f"{spec.mnemonic}: {problem} (fields: {', '.join(names) or 'none'})")
        return Op(spec.mnemonic, fields)

    build.__name__ = build.__qualname__ = spec.mnemonic
    build.__doc__ = spec.doc
    return build


OPS: dict[str, Callable[..., Op]] = {spec.mnemonic: _constructor(spec) for spec in INSTRUCTIONS}
"""Mnemonic -> its constructor; each is also this module's attribute of that name (`LOAD`, `VADD`...)."""

globals().update(OPS)
__all__ = ["OPS", "Op", *OPS]
