"""ONNX op converters, registered with `@converter("OpType", ...)`.

A converter receives an `OnnxNode` (the ONNX node, bound to the import context)
and returns the graph values for the node's outputs: a NodeValue, or a list with
one entry per ONNX output (None for an output it does not produce).
"""
from __future__ import annotations

from typing import Callable

from ...graph.table import KindTable

Converter = Callable[..., object]
CONVERTERS = KindTable("an ONNX converter")
converter = CONVERTERS.register
"""`@converter("OpType", ...)` registers the translation of each ONNX op type (default domain)."""
