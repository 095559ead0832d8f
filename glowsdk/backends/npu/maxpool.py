"""Max pooling as a pass over rows, then one over columns: fewer vector-engine steps than POOL's whole window.

POOL costs kh x kw lane-steps per output element. A maximum is separable: the maximum over a kh x kw window is
the maximum over its kw columns of the maxima over its kh rows. Here the load DMA brings a tile's input rows
split by phase (row j of phase f is input row `first + f + j * sh`: whole rows, a row stride of sh rows, so
every DRAM run is as long as POOL's), padded with -128 on every side; no window is all padding (the ISA's
pads are below the window), so the padding never wins a maximum and the result is the maximum over the
image cells, as ONNX pools. Then kh - 1 VMAXes over whole dense rows give each output row the maximum of its
kh input rows (output row i reads row i + k div sh of phase k mod sh), and one POOL of a 1 x kw window,
stride sw, the maximum over columns:

    (kh - 1) * OH * W' + kw * OH * OW   lane-steps per channel, against   kh * kw * OH * OW

with W' the padded input width: a 3 x 3 window 5 against 9 at stride 1, 7 against 9 at stride 2. The layer
builder takes this form where it is fewer steps and fits (`separable`), else POOL's window (vector.PoolLayer).
Tiles are as many output rows as `_cycles` estimates fastest: short enough that the vector engine starts
soon after the layer, long enough that the DRAM latency of every LOAD does not make the loads the bottleneck.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from isa.config import ArchConfig
from isa.schema import COUNT
from sim.timing import vector_cycles

from .instructions import CONFIG_LOAD, CONFIG_PAD, CONFIG_POOL, CONFIG_STORE, LOAD, POOL, STORE, VMAX, Op
from .pipeline import Step, Tile
from .scratchpad import align
from .tensors import DramTensor
from .vector import PoolLayer

PAD = -128
"""The padding of a max pool's rows: below every int8, so it never wins a maximum."""
MAX_COLS = 65535
"""VMAX's cols field (16 bits): a tile's padded row of channels."""
MAX_POOL_SIZE = 4095
"""POOL's height and width fields (12 bits)."""
MAX_PHASES = (1 << COUNT.width) - 1
"""A tile loads one row phase per LOAD, and the vector engine waits for them all with one semaphore count."""


def _phase_rows(kernel: int, stride: int, rows: int) -> list[int]:
    """Input rows each phase holds for `rows` output rows (phases at or past the window hold none)."""
    return [rows + (kernel - 1 - f) // stride for f in range(min(stride, kernel))]


@dataclass
class SeparableMaxPoolLayer:
    """A MaxPool (`pool`'s geometry) in tiles of `rows` output rows and `channels` channels."""

    pool: PoolLayer
    rows: int
    channels: int
    base: int = 0
    """the scratchpad address of its two slots (above a convolution's buffers when it runs beside one)"""

    @property
    def width(self) -> int:
        """The padded input width W'."""
        return self.pool.pads[1] + self.pool.width + self.pool.pads[3]

    def _layout(self) -> tuple[list[int], int, int, int]:
        """(offset of each phase's buffer, of the vertical maxima, of the result, slot bytes) in one slot."""
        p, n = self.pool, self.channels
        offsets, at = [], 0
        for count in _phase_rows(p.kernel[0], p.stride[0], self.rows):
            offsets.append(at)
            at += align(count * self.width * n)
        vertical = at
        at += align(self.rows * self.width * n)
        return offsets, vertical, at, at + align(self.rows * p.out_width * n)

    def slot_bytes(self) -> int:
        return self._layout()[3]

    def tiles(self, base: Callable[[DramTensor], int], config: ArchConfig) -> list[Tile]:
        p = self.pool
        (kh, kw), (sh, sw) = p.kernel, p.stride
        offsets, vertical, result, slot_bytes = self._layout()
        src, dst = p.source, p.result
        tiles = []
        for b in range(src.batch):
            for oy0 in range(0, p.out_height, self.rows):
                rows = min(self.rows, p.out_height - oy0)
                first = oy0 * sh - p.pads[0]
                for c0 in range(0, p.channels, self.channels):
                    n = min(self.channels, p.channels - c0)
                    slot = self.base + (len(tiles) % 2) * slot_bytes
                    loads: list[Op] = [CONFIG_LOAD(row_stride=sh * src.row_stride, plane_stride=0,
                                                   col_stride=src.pixel_stride, elem_bytes=n)]
                    for f, count in enumerate(_phase_rows(kh, sh, rows)):
                        top, real = _real_rows(first + f, sh, count, p.height)
                        loads += [CONFIG_PAD(pad_top=top, pad_bottom=count - top - real, pad_left=p.pads[1],
                                             pad_right=p.pads[3], pad_value=PAD),
                                  LOAD(dram=base(src.tensor) + b * src.batch_stride
                                       + (first + f + sh * top) * src.row_stride + c0, space="spad",
                                       sram=slot + offsets[f], planes=1, rows=real, cols=p.width)]
                    loads.append(CONFIG_PAD(pad_top=0, pad_bottom=0, pad_left=0, pad_right=0, pad_value=0))
                    line = self.width * n
                    maxima = slot + vertical
                    vector: list[Op] = []
                    for k in range(1, kh):
                        vector.append(VMAX(
                            dst_space="spad", dst=maxima, src1_space="spad",
                            src1=slot + offsets[0] if k == 1 else maxima, src2_space="spad",
                            src2=slot + offsets[k % sh] + (k // sh) * line, rows=rows, cols=line, bcast=0))
                    out = slot + result
                    if kw == 1 and sw == 1:
                        out = maxima
                    else:
                        vector += [CONFIG_POOL(kh=1, kw=kw, stride_h=1, stride_w=sw, pad_top=0, pad_bottom=0,
                                               pad_left=0, pad_right=0, count_pad=0, pad_value=0),
                                   POOL(op="max", dst=out, src=maxima, height=rows, width=self.width,
                                        channels=n)]
                    stores = [CONFIG_STORE(row_stride=dst.row_stride, plane_stride=0,
                                           col_stride=dst.pixel_stride, elem_bytes=n),
                              STORE(dram=base(dst.tensor) + b * dst.batch_stride + oy0 * dst.row_stride + c0,
                                    space="spad", sram=out, planes=1, rows=rows, cols=p.out_width)]
                    tiles.append(Tile([Step(loads)], vector, stores))
        return tiles


def _real_rows(start: int, stride: int, count: int, height: int) -> tuple[int, int]:
    """(padding rows before, image rows) among rows start, start + stride, ... (count of them) of an image of
    `height` rows: the rows above row 0 come first, those past the last row after the image rows."""
    top = min(count, -(start // stride)) if start < 0 else 0
    return top, sum(1 for j in range(top, count) if start + stride * j < height)


def _cycles(pool: PoolLayer, rows: int, n: int, config: ArchConfig) -> float:
    """Estimated cycles of the layer in tiles of `rows` output rows and `n` channels: the first tile's loads
    (the vector engine waits for them), then the busiest engine, then the last tile's vector work and store.
    Each LOAD and STORE pays the DRAM latency (an engine runs its transfers one after another), so short tiles
    move their bytes slower; long ones start the vector engine late."""
    (kh, kw), (sh, sw) = pool.kernel, pool.stride
    width = pool.pads[1] + pool.width + pool.pads[3]
    latency, bw = config.dram_latency_cycles, config.dram_bytes_per_cycle
    blocks = -(-pool.channels // n)

    def tile(r: int) -> tuple[float, float, float]:
        loads = sum(latency + count * pool.width * n / bw for count in _phase_rows(kh, sh, r))
        work = (kh - 1) * r * width * n + (0 if kw == 1 and sw == 1 else kw * r * pool.out_width * n)
        return loads, vector_cycles(work, config) + kh * config.vector_pipeline_cycles, \
            latency + r * pool.out_width * n / bw

    full, last = divmod(pool.out_height, rows)
    pieces = [(rows, full * blocks), (last, blocks)] if last else [(rows, full * blocks)]
    costs = [(tile(r), k) for r, k in pieces]
    busiest = max(sum(c[e] * k for c, k in costs) for e in range(3))
    return costs[0][0][0] + busiest + costs[-1][0][1] + costs[-1][0][2]


def separable(pool: PoolLayer, config: ArchConfig, base: int = 0) -> SeparableMaxPoolLayer | None:
    """`pool` as the separable layer, if it is a max pool that takes fewer vector steps so and fits in the
    scratchpad from `base` up; else None."""
    (kh, kw), (sh, sw) = pool.kernel, pool.stride
    width = pool.pads[1] + pool.width + pool.pads[3]
    if pool.op != "MaxPool" or kh < 2 or min(kh, sh) > MAX_PHASES or (width - kw) // sw + 1 != pool.out_width \
            or width > MAX_POOL_SIZE:
        return None
    columns = 0 if kw == 1 and sw == 1 else kw * pool.out_width
    if (kh - 1) * width + columns >= kh * kw * pool.out_width:
        return None
    budget = (config.scratchpad_bytes - base) // 2
    n = pool.channels
    while n > 1 and (width * n > MAX_COLS or SeparableMaxPoolLayer(pool, 1, n).slot_bytes() > budget):
        n = -(-n // 2)
    if width * n > MAX_COLS or SeparableMaxPoolLayer(pool, 1, n).slot_bytes() > budget:
        return None
    most = 1
    while most < min(pool.out_height, MAX_POOL_SIZE) and \
            SeparableMaxPoolLayer(pool, most + 1, n).slot_bytes() <= budget:
        most += 1
    rows = min(range(1, most + 1), key=lambda r: _cycles(pool, r, n, config))
    for oy0 in range(0, pool.out_height, rows):  # every phase of every tile must hold an image row to load
        first = oy0 * sh - pool.pads[0]
        phases = _phase_rows(kh, sh, min(rows, pool.out_height - oy0))
        if any(_real_rows(first + f, sh, c, pool.height)[1] < 1 for f, c in enumerate(phases)):
            return None
    return SeparableMaxPoolLayer(pool, rows, n, base)
