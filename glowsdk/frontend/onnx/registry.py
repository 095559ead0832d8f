"""ONNX op converters, registered with `@converter("OpType", ...)`.

A converter receives an `OnnxNode` (the ONNX node, bound to the import context)
and returns the graph values for the node's outputs: a NodeValue, or a list with
one entry per ONNX output (None for an output it does not produce).
"""
from __future__ import annotations

from typing import Callable

Converter = Callable[..., object]
CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str) -> Callable[[Converter], Converter]:
    """Register `fn` as the translation of each ONNX op type in `op_types` (default domain)."""

    def register(fn: Converter) -> Converter:
        for op in op_types:
            if op in CONVERTERS:
                raise ValueError(f"a converter for {op} is registered twice")
            CONVERTERS[op] = fn
        return fn

    return register
