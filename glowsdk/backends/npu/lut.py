"""The int8 table-lookup layer: a unary function (Sigmoid, Tanh, GELU...) as the vector engine's LUT.

A TableLookup's 256-byte table (quant.lookup_table, among the constants) is loaded into scratchpad bytes
0..255 with the first chunk and made the vector engine's table by LUT_LOAD, which copies it, so the chunks
never overwrite what it still reads. The tensor then streams in flat chunks, as the element-wise layers
do (vector.py): LOAD, `LUT` (spad[y + i] = table[spad[x + i] + 128], exactly TableLookup's semantics),
STORE, input and output in separate buffers of two alternating slots. The result keeps the input's
layout (an NHWC image stays one; anything else is made row-major).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from isa.config import ArchConfig
from isa.program import LUT_BYTES

from ...errors import UnsupportedError
from ...graph.node import Node
from .instructions import CONFIG_LOAD, CONFIG_STORE, LOAD, LUT, LUT_LOAD, STORE, Op
from .pipeline import Step, Tile
from .tensors import DramTensor
from .vector import CHUNK

if TYPE_CHECKING:
    from .layers import LayerBuilder


def _chunk(config: ArchConfig) -> int:
    """Bytes per chunk: two slots of (input, output) after the table."""
    chunk = min(CHUNK, (config.scratchpad_bytes - LUT_BYTES) // 4) // 64 * 64
    if chunk < 64:
        raise UnsupportedError(f"a table lookup does not fit the {config.scratchpad_bytes}-byte scratchpad")
    return chunk


@dataclass
class LutLayer:
    """TableLookup of a compact int8 tensor into another of the same layout."""

    source: DramTensor
    result: DramTensor
    table: DramTensor
    """the 256 int8 entries, among the constants"""

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        if not self.source.same_layout(self.result) or self.source.extent != self.source.elements:
            raise AssertionError("a table lookup streams compact tensors of one layout")
        chunk = _chunk(config)
        total = self.result.elements
        tiles = []
        for k, start in enumerate(range(0, total, chunk)):
            n = min(chunk, total - start)
            x = LUT_BYTES + (k % 2) * 2 * chunk
            y = x + chunk
            loads: list[Op] = [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n),
                                 LOAD(dram=base(self.source) + start, space="spad", sram=x, planes=1,
                                      rows=1, cols=1)]
            vector: list[Op] = [LUT(dst=y, src=x, count=n)]
            if k == 0:  # the table, once: LUT_LOAD waits for this step's loads like the LUT after it
                loads += [CONFIG_LOAD(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=LUT_BYTES),
                          LOAD(dram=base(self.table), space="spad", sram=0, planes=1, rows=1, cols=1)]
                vector.insert(0, LUT_LOAD(src=0))
            stores: list[Op] = [CONFIG_STORE(row_stride=0, plane_stride=0, col_stride=0, elem_bytes=n),
                                  STORE(dram=base(self.result) + start, space="spad", sram=y, planes=1,
                                        rows=1, cols=1)]
            tiles.append(Tile([Step(loads)], vector, stores))
        return tiles


def lut_layer(builder: LayerBuilder, node: Node) -> LutLayer:
    """A TableLookup node's layer; its result is placed beside the input, in the input's layout."""
    source = builder.tensor(node.input)
    nhwc = source.is_nhwc() and source.extent == source.elements
    source = builder.laid_out(node.input, nhwc)
    out = builder._new(node.result(), nhwc)
    builder.values[node.result()] = out
    return LutLayer(source, out, builder.tensor(node.table))
