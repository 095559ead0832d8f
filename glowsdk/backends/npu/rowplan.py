"""First row tiles planned along a chain of convolutions, so that each reads only rows the layer before stores early.

The layer before loads a convolution's first input rows once it has stored them, before its own last row tile
(prefetch.py: `GemmLayer.stored_early`), and the first product then runs before the barrier (handoff.py). A 3 x 3
layer's first row tile reads a row below its last output row: tiled [7, 7] after a 1 x 1 layer tiled [7, 7], it
reads row 7, which the layer before stores only in its last tile, so its first product waits for the barrier and
its load. The first tile's size is free within limits: the array's cycles rise in folds of its rows of pixels, so
[8, 6] or [6, 8] may cost it what [7, 7] does. A shorter first tile of the 3 x 3 layer, or a longer one of the
layer before, lets the rows load early; but a longer first tile reads more rows of its own layer before, and a
shorter one stores fewer for the next (a 1 x 1 layer reads the rows it writes, each 3 x 3 one a row more): the
choice runs along the chain of layers.

`plan_first_rows` chooses every convolution's first row tile at once, by dynamic programming over the layers in
order: the most layers whose first input the layer before loads (exactly as `prefetch.input_region` decides,
every region placed), then the most of them whose rows it stores before its last row tile (not split, whose last
rows load after its last STORE: `prefetch.split_row`), then the fewest of them whose first step streams (the layer
before loads its first chunk only: `GemmLayer.first_chunks`), then the least change from the tiling's own first
tiles. A layer keeps its tiling's array
cycles or fewer, its buffers fit the SRAMs (a first tile longer than the tiling's rows lengthens them, and the
other tiles may take up to that many), below the weight blocks the layers before and after load for it
(prefetch.plan_prefetches, which runs first), and every layer whose first input is loaded early without the plan
still is.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

from isa.config import ArchConfig
from sim.timing import matmul_cycles

from .epilogue import AddTensor, vector_passes
from .expected import expected
from .gemm import GemmLayer, prologue_loads
from .layers import Layer
from .prefetch import input_region, split_row
from .step_cost import Pitches, split
from .tiling import Tiling, fits, halves


MAX_CHANGE = 1
"""The most rows a first tile is made longer or shorter than the tiling's. The cost models miss how much an uneven
split of a load-bound layer's rows idles the array (resnet50 on server: its stage-4 projection tiled [9, 5] rather
than [7, 7] waits 2,264 cycles more for loads, [8, 6] 411 more, while a 3 x 3 layer's first input loaded early saves
about 1,059)."""


@dataclass(frozen=True)
class Option:
    """One way to tile a layer's rows: its first tile's rows (0: the tiling's), the tiling it needs, and the layer's
    expected cycles in it (`_expected`)."""

    first: int
    tiling: Tiling
    cycles: tuple[float, float, float]


def plan_first_rows(layers: list[Layer], config: ArchConfig, across: dict[int, GemmLayer]) -> None:
    """Set `GemmLayer.first_rows` (and `tiling.rows`, where the first tile or the rest need more) of the layers of
    `layers` as the module docstring says; run after prefetch.plan_prefetches (`across`: the layers it has load the
    weights of a layer past an element-wise one), before plan_input_prefetches."""
    bodies = [layer.body for layer in layers]
    afters = [across.get(k, bodies[k + 1] if k + 1 < len(bodies) else None) for k in range(len(bodies))]
    options = [_options(body, afters[k], config) for k, body in enumerate(bodies)]
    if all(len(o) == 1 for o in options):
        return
    kept = _prefetched(bodies, afters, config)
    # states of each layer: (option, its prefetched input region) -> ((inputs loaded early, of them whole before the
    # layer before's last row tile, -those of them only in part, -change), back pointer)
    states: list[dict] = [{(i, None): ((0, 0, 0, -_change(bodies[0], option)), None)
                           for i, option in enumerate(options[0])}]
    for k in range(1, len(bodies)):
        prev, body, after = bodies[k - 1], bodies[k], afters[k]
        current: dict = {}
        ranked = sorted(states[-1].items(), key=lambda item: item[1][0], reverse=True)  # (ties: the first found)
        for i, option in enumerate(options[k]):
            change, part = _change(body, option), _streamed(body, option)
            for (j, region), (score, _) in ranked:
                got, whole = _region(prev, options[k - 1][j], region, body, option, after, config)
                if got is None and kept[k] or not _no_slower(body, option, options[k][0], got is not None):
                    continue
                key = (i, got)
                value = (score[0] + (got is not None), score[1] + whole, score[2] - (got is not None and part),
                         score[3] - change)
                if key not in current or value > current[key][0]:
                    current[key] = (value, (j, region))
        states.append(current)
    key = max(states[-1], key=lambda state: states[-1][state][0])
    for k in range(len(bodies) - 1, -1, -1):
        _apply(bodies[k], options[k][key[0]])
        key = states[k][key][1] if k else None


def _no_slower(body: object, option: Option | None, default: Option | None, ahead: bool) -> bool:
    """Whether a layer is expected to take no more cycles in an option than in its tiling's own row tiles, with
    its first input loaded early (`ahead`) or not, in both."""
    if option is None or not option.first:
        return True
    at = 2 if ahead else 1 if body.prefetched is not None else 0
    return option.cycles[at] <= default.cycles[at]


def _region(prev: object, prev_option: Option | None, prev_region: tuple[int, int] | None, body: object,
            option: Option | None, after: object, config: ArchConfig) -> tuple[tuple[int, int] | None, bool]:
    """`prefetch.input_region` of `body` in `option` after `prev` in its option with its prefetched input region,
    and whether the rows it loads there are all stored before `prev`'s last row tile (not `prefetch.split_row`'s:
    whose rest loads after `prev`'s last STORE, which the first product then waits for)."""
    if not isinstance(prev, GemmLayer) or not isinstance(body, GemmLayer):
        return None, False
    saved = prev.prefetched_input
    prev.prefetched_input = prev_region
    try:
        with _trying(prev, prev_option), _trying(body, option):
            region = input_region(prev, body, after, config)
            return region, region is not None and split_row(prev, body) != prev.stored_early()
    finally:
        prev.prefetched_input = saved


def _prefetched(bodies: list[object], afters: list[object], config: ArchConfig) -> list[bool]:
    """Which layers' first inputs plan_input_prefetches loads early with every layer in its tiling's row tiles (each
    layer's weight loads for `afters`)."""
    loaded, region = [False], None
    for k in range(1, len(bodies)):
        region, _ = _region(bodies[k - 1], None, region, bodies[k], None, afters[k], config)
        loaded.append(region is not None)
    return loaded


def _apply(body: object, option: Option | None) -> None:
    """Give a layer an option's first tile and tiling (None: leave it as it is)."""
    if option is not None:
        body.first_rows, body.tiling = option.first, option.tiling


@contextmanager
def _trying(body: GemmLayer, option: Option | None) -> Iterator[GemmLayer]:
    """The layer in an option for the `with` block, as it was after it."""
    saved = body.first_rows, body.tiling
    _apply(body, option)
    try:
        yield body
    finally:
        body.first_rows, body.tiling = saved


def _change(body: object, option: Option | None) -> int:
    """How many rows an option's first tile differs from the tiling's own."""
    if option is None or not option.first:
        return 0
    return abs(option.first - _default_first(body))


def _default_first(body: GemmLayer) -> int:
    """The rows of a layer's first tile in its tiling's own row tiles."""
    with _trying(body, Option(0, body.tiling, ())):
        oy0, oy1 = body.row_tiles()[0]
    return oy1 - oy0


def _options(body: object, after: object, config: ArchConfig) -> list[Option | None]:
    """A layer's ways to tile its rows, its tiling's own first (None: a layer the plan leaves alone): every first
    tile of a plain convolution tiled over rows that costs the array no more cycles in no more row tiles, and
    the layer no more expected cycles (`_expected`) in some state of its prefetches (`_no_slower` picks by the
    state), whose first step streams only where the tiling's does, at most `MAX_CHANGE` rows from the tiling's,
    whose buffers fit the SRAMs below the weight blocks prefetched for it and for the layer `after` (and that keeps
    three steps where both are prefetched: plan_prefetches' condition)."""
    if not isinstance(body, GemmLayer) or body.groups != 1 or body.packing or body.gate or body.pool \
            or body.window or body.split or body.tiling.images != 1 or body.first_rows:
        return [None]
    t, s = body.tiling, body.shape
    default = Option(0, t, ())  # (its expected cycles once another option needs them: the model takes time)
    sizes = _sizes(body, default)
    if len(sizes) < 2:
        return [None]
    limit = min([config.scratchpad_bytes] + [a.prefetched for a in (body, after)
                                              if isinstance(a, GemmLayer) and a.prefetched is not None])
    reserved = body.spad_end() - t.spad_bytes(s)
    cost, steps = _array(body, default, config), body.steps()
    streams = _streams(body, default)
    chosen: list[Option | None] = [default]
    for first in range(max(1, sizes[0] - MAX_CHANGE), min(s.out_height, sizes[0] + MAX_CHANGE + 1)):
        if first == sizes[0]:
            continue
        rest = -(-(s.out_height - first) // (len(sizes) - 1))
        for rows in sorted({max(t.rows, first), max(first, rest)}):
            option = Option(first, replace(t, rows=rows), ())
            if not fits(s, option.tiling, limit - reserved, config.accumulator_bytes // 4):
                continue
            if len(_sizes(body, option)) > len(sizes) or _array(body, option, config) > cost \
                    or streams < _streams(body, option):
                continue  # (more row tiles: more loads of the input, of weight blocks the row tiles do not share)
            option = replace(option, cycles=_expected(body, option, config))
            default = default if default.cycles else replace(default, cycles=_expected(body, default, config))
            if not any(a <= b for a, b in zip(option.cycles, default.cycles)):
                continue
            with _trying(body, option):
                few = body.steps() < 3 and body.prefetched is not None and isinstance(after, GemmLayer) \
                    and after.prefetched is not None and steps >= 3
            if not few:
                chosen.append(option)
                break
    return [default, *chosen[1:]]


def _streamed(body: object, option: Option | None) -> bool:
    """Whether a layer's first step streams in an option (None: as it is), so that where the layer before loads its
    input it loads only the first chunk: the others load after the barrier while the array waits (resnet50's conv__12
    on server, tiled [10, 10, 8]: 2.1k cycles; [9, 10, 9] loads none, in one array fold less per step)."""
    if option is None:
        return isinstance(body, GemmLayer) and len(body.first_chunks()) > 1
    return _streams(body, option)


def _streams(body: GemmLayer, option: Option) -> bool:
    """Whether a layer's first step streams in an option (`GemmLayer.first_chunks`): the layer before would load
    only its first chunk, the rest loads after the barrier while the array waits."""
    with _trying(body, option):
        return len(body.first_chunks()) > 1


def _expected(body: GemmLayer, option: Option, config: ArchConfig) -> tuple[float, float, float]:
    """The layer's expected cycles in an option (expected.expected: alone, its first weight block prefetched, its
    first input rows too): a first tile that starts the array sooner may leave a longer last tile to drain, or a
    short first step that hides little of the next one's loads."""
    s, t = body.shape, option.tiling
    extra = sum(isinstance(op, AddTensor) for op in body.epilogue)
    return expected(s, t.rows, t.n, t.c, config, extra, vector_passes(body.epilogue),
                    Pitches(body.source.pixel_stride, body.result.pixel_stride), halve=halves(s, t.n, t.c, extra),
                    tables=prologue_loads(s, body.requant.per_channel, body.epilogue), first=option.first)


def _sizes(body: GemmLayer, option: Option) -> list[int]:
    """The row tiles' sizes of a layer in an option."""
    with _trying(body, option):
        return [b - a for a, b in body.row_tiles()]


def _array(body: GemmLayer, option: Option, config: ArchConfig) -> int:
    """The array's cycles for a layer's products in an option: each row tile's steps, each product in its better
    dataflow, the first step's chunks apart where it streams (`GemmLayer.first_chunks`)."""
    s, t = body.shape, body.tiling
    with _trying(body, option):
        sizes = [b - a for a, b in body.row_tiles()]
        chunks = [b - a for a, b in body.first_chunks()]

    def product(rows: int, k: int, n: int) -> int:
        return min(matmul_cycles(rows * s.out_width, k, n, flow, config) for flow in config.dataflows)
    total = 0
    for size in sizes:
        for n, n_count in split(s.out_channels, t.n):
            for c, c_count in split(s.channels, t.c):
                total += n_count * c_count * product(size, s.kh * s.kw * c, n)
    if len(chunks) > 1:  # (the first step: one product per chunk)
        n, c = min(t.n, s.out_channels), min(t.c, s.channels)
        total += sum(product(rows, s.kh * s.kw * c, n) for rows in chunks) - product(sizes[0], s.kh * s.kw * c, n)
    return total * body.source.batch
