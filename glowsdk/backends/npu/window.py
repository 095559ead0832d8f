"""A 3x3 stride-2 max pool done by the tiles of the convolution before it (`gemm.GemmLayer.window`).

Requantization never decreases and the bias is the same along a channel, so the maximum of the int32 sums
requantized is the maximum of the int8 results: a tile maxes its rows in the accumulator and requantizes only the
pooled ones. A tile starts on an even row 2a, which ends the window of pooled row a - 1; the maximum of that
window's first two rows waits at `running` (the tile before left it there), and a tile of an even number of rows
leaves its last two rows' maximum there for the next.

Two ways across. Plain: the pooled rows, whole, are requantized and pooled across by POOL (a 1x3 window, stride
2): 2 maxima down per pixel of a pooled row, 1 requantization, 3 steps of POOL per pooled pixel, about 9 vector
steps per pooled pixel. Split: each step computes the tile's even columns, then its odd ones, as two products
(a stride twice the convolution's) whose rows lie one block after the other; two VMAXes over whole rows then
leave in odd column j the maximum of columns 2j, 2j + 1 and 2j + 2, and the maxima down and the requantization
run on the pooled pixels only: about 7 steps, at the cost of a fill and drain of the array more per step. The
split takes an even number of columns (`split_shape`: one past an odd image's last, over the zero point's
padding, computed and never read), and a running maximum half as wide.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from isa.config import ArchConfig
from sim.timing import vector_cycles

from ...errors import UnsupportedError
from .instructions import CONFIG_POOL, POOL, VMAX, Op
from .step_cost import ConvShape
from .tiling import Tiling, array_cycles, choose_tiling

WINDOW_ARRAY_MARGIN = 1.05
"""The most array time a fused pool's tiles may add: a pool beside the convolution that does not hide costs its
own DRAM traffic (SqueezeNet's fire-module pools: 10,000 and 5,000 cycles beside expansions whose even-row tiles
cost the array 2% and 5% more)."""


def split_shape(shape: ConvShape) -> ConvShape:
    """The geometry a split layer's tiles compute: its columns rounded up to an even count, the input padded on the
    right as far as the last one's window reaches."""
    width = shape.out_width + shape.out_width % 2
    reach = (width - 1) * shape.stride[1] + (shape.kw - 1) * shape.dilation[1] + 1
    top, left, bottom, right = shape.pads
    return replace(shape, out_width=width, pads=(top, left, bottom, right + max(0, reach - shape.padded_width)))


def running_width(shape: ConvShape, split: bool) -> int:
    """Accumulator words per output channel of the running maximum: two rows maxed down, whole, or when split
    already maxed across (a pooled row's pixels)."""
    return (shape.out_width - 1) // 2 if split else shape.out_width


def vector_steps(shape: ConvShape, split: bool, config: ArchConfig) -> int:
    """The vector engine's cycles for the pool and the requantization of a layer of `shape` (no epilogue)."""
    rows, width = (shape.out_height - 1) // 2, (shape.out_width - 1) // 2
    if split:  # the maxima across over every row's halves; down and the requantization over the pooled pixels
        work = 2 * shape.out_height * (split_shape(shape).out_width // 2) + 3 * rows * width
    else:  # down over whole rows, their requantization, POOL across
        work = 3 * rows * shape.out_width + 3 * rows * width
    return vector_cycles(work * shape.out_channels, config)


def window_tiling(shape: ConvShape, config: ArchConfig, reserved_spad: int, passes: int, tables: tuple[int, ...] = (),
                  pad: int = 0) -> tuple[Tiling, bool] | None:
    """The tiling of a layer of `shape` whose tiles pool its result (`reserved_spad` bytes of tables below them,
    `passes` vector passes of its requantization and epilogue) and whether it is split: pairs of output rows
    each, beside the running maximum, split only where the vector engine is the busier unsplit and the split is
    estimated faster. None if none fits, or if its array takes more than `WINDOW_ARRAY_MARGIN` longer than the
    unpooled layer's would (smaller tiles fill and drain the array more often): a pool beside an array-bound
    convolution hides under it (overlap.py), whereas fusing it costs array time. `tables`: as
    tiling.choose_tiling's; a pool padded by `pad` on top and left is not split (POOL pads the columns)."""
    try:  # (the most rows that fit each: the margin weighs what the pool adds, not a choice of fewer rows)
        tiling = choose_tiling(shape, config, reserved_spad, vector_passes=passes + 2,
                               reserved_acc=running_width(shape, False) * shape.out_channels, row_multiple=2,
                               fewer=False, tables=tables)
        alone = choose_tiling(shape, config, reserved_spad, vector_passes=passes, fewer=False, tables=tables)
    except UnsupportedError:
        return None
    plain = array_cycles(shape, tiling, config)
    if plain > WINDOW_ARRAY_MARGIN * array_cycles(shape, alone, config):
        return None
    if pad:
        return tiling, False
    wide = split_shape(shape)
    try:  # the maxima across are one pass over a tile (two over its halves); the rest runs on a quarter of it
        halves = choose_tiling(wide, config, reserved_spad, vector_passes=passes,
                               reserved_acc=running_width(shape, True) * shape.out_channels, row_multiple=2,
                               products=2, pooled=True, tables=tables)
    except UnsupportedError:
        return tiling, False
    split = 2 * array_cycles(replace(wide, out_width=wide.out_width // 2), halves, config)
    vector = vector_steps(shape, False, config)
    if plain < vector and max(split, vector_steps(shape, True, config)) < vector:
        return halves, True
    return tiling, False


@dataclass(frozen=True)
class TileMaxima:
    """One tile's maxima in the accumulator: `down` before its pooled rows are requantized, `keep` after."""

    down: list[Op]
    pooled: int
    """pooled rows the tile completes (0: it stores nothing)"""
    row: int
    """the first of them, in the pooled image"""
    rows: int
    """accumulator address of the completed pooled rows, one after another"""
    pixels: int
    """pixels per pooled row there (the whole width when not split: POOL then pools them across)"""
    keep: list[Op]
    """the running maximum for the next tile (its rows are read after the requantization)"""


def tile_maxima(shape: ConvShape, split: bool, oy0: int, oy1: int, n: int, acc: int, running: int, pad: int = 0
                ) -> TileMaxima:
    """The maxima of the tile of output rows [oy0, oy1) and `n` channels at `acc` (laid out by `split_shape` when
    split), `running` its channels' running maximum, under a pool padded by `pad` rows on top (0 or 1). A padded
    pool is the unpadded one over the rows with row 0 repeated on top (a repeated row leaves a maximum as the
    padding does): virtual row v is output row v - pad, and row 0 for v = 0. The windows wholly in the tile
    (virtual rows 2k, 2k + 1, 2k + 2 from its first) are maxed into pooled rows one after another from the tile's
    first row, then the window from the tile before into pooled row 0 (the tile's row 0 is read by no other);
    alone, it stays at `running`, so that the tile's rows stay for the next. The pooled row of window k lands on
    the tile's row top + k, virtual row top + k (+ 1 in a padded first tile), which no later window reads: they
    start at virtual row 2k + 2."""
    if split and pad:
        raise AssertionError("a padded window pool is not split")
    v0, v1 = (oy0 + pad if oy0 else 0), oy1 + pad
    rows, across = v1 - v0, (shape.out_width - 1) // 2
    inner = (rows - 1) // 2
    down: list[Op] = []
    if split:  # each row's even columns, then (a block later) its odd ones: odd column j takes 2j, 2j + 1, 2j + 2
        pitch = shape.out_width // 2 * n
        base, width, pixels = acc + rows * pitch, across * n, across
        down += [VMAX(dst_space="acc", dst=base, src1_space="acc", src1=acc, src2_space="acc", src2=base,
                      rows=rows, cols=pitch, bcast=0),
                 VMAX(dst_space="acc", dst=base, src1_space="acc", src1=base, src2_space="acc", src2=acc + n,
                      rows=rows, cols=pitch, bcast=0)]
    else:
        base, pitch, width, pixels = acc, shape.out_width * n, shape.out_width * n, shape.out_width

    def row(j: int) -> int:
        """The address of the tile's virtual row v0 + j (the repeated row 0 is row 0's)."""
        return base + max(v0 + j - pad - oy0, 0) * pitch

    def vmax(dst: int, src1: int, src2: int) -> Op:
        return VMAX(dst_space="acc", dst=dst, src1_space="acc", src1=src1, src2_space="acc", src2=src2, rows=1,
                    cols=width, bcast=0)
    top = int(bool(v0))
    for k in range(inner):
        at = base + (top + k) * width
        down += [vmax(at, row(2 * k), row(2 * k + 1)), vmax(at, at, row(2 * k + 2))]
    first = base if inner or not v0 else running
    if v0:
        down.append(vmax(first, running, base))
    keep = [vmax(running, row(rows - 2), row(rows - 1))] if rows % 2 == 0 and oy1 < shape.out_height else []
    return TileMaxima(down, top + inner, v0 // 2 - top, first, pixels, keep)


def pool_across(out: int, pooled: int, width: int, n: int, pad: int = 0, dst: int | None = None) -> list[Op]:
    """POOL of `pooled` requantized rows of `width` pixels at `out` across (1x3, stride 2, `pad` columns of
    padding on the left), into the rows after (or at `dst`: where the layer keeps them, kept_inputs.py)."""
    return [CONFIG_POOL(kh=1, kw=3, stride_h=1, stride_w=2, pad_top=0, pad_bottom=0, pad_left=pad, pad_right=0,
                        count_pad=0, pad_value=0),
            POOL(op="max", dst=out + pooled * width * n if dst is None else dst, src=out, height=pooled, width=width,
                 channels=n)]


def window_pooled(size: int, pad: int) -> int:
    """Pooled rows (or columns) of `size` rows (columns) under the 3x3 stride-2 window padded by `pad` before and
    none after (not graph.nodes.nn's general pooled size)."""
    return (size + pad - 3) // 2 + 1
