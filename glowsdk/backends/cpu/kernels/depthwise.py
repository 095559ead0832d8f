"""Depthwise convolution: every tap summed in registers over zero-padded phase planes.

A depthwise filter (one input channel per group) is too small for a GEMM tile, and
the general direct loop (conv.py) adds one tap at a time into the output plane:
each of a 7x7 filter's 49 taps reads and writes the whole plane again, and on a
7 x 7 plane a row is too short to vectorise. Here, per (image, filter), with
strides (sr, sc):

1. the input plane is copied, zero-padded, into this thread's sr x sc phase planes
   of Hq x Wq = ceil(Hp / sr) x ceil(Wp / sc) floats, (Hp, Wp) the padded plane:
   padded element (p, q) goes to phase (p % sr, q % sc) at (p // sr, q // sc). Each
   input row is one loop storing sc phases per iteration (an interleaved load LLVM
   vectorises); stride 1 is a single phase, the padded plane itself. The borders
   are zeroed once per run and never written, so no tap tests a bound;
2. a tap (ky, kx) of output (oh, ow) reads padded (sr oh + ky dr, sc ow + kx dc), that is
   phase ((ky dr) % sr, (kx dc) % sc) at (oh + ky dr // sr, ow + kx dc // sc): in every
   phase plane, consecutive outputs read consecutive elements. So one flat loop over
   i < (H_out - 1) * Wq + W_out computes y[i] = bias + sum over taps of w[t] *
   phase_t[i + offset(t)], all taps unrolled with their weights in registers, long and
   contiguous (a 7 x 7 plane is one loop of 61, not 7 loops of 7), and LLVM vectorises
   it across output columns (8 or 16 lanes). Elements at columns W_out..Wq of a row
   are computed and dropped: (Wq - W_out) / Wq of the work. Stride 2 used to take the
   general loop at a quarter of this speed (mobilenet_v2's 96-channel 112 -> 56 layer:
   5 GFLOP/s);
3. the W_out valid columns of each row are stored to the output a vector at a time,
   through the element-wise instructions stacked onto the convolution (epilogue.py:
   the Clip or ReLU after it), so the output is written once.

Column strides 1 and 2 (`takes_rows`) skip the phase planes (`_emit_rows`): output
rows are computed straight from the input rows their taps read, a vector of output
columns at a time, each tap one load (at stride 2, the even or odd lanes of two loads)
(a row above or below the plane reads a zeroed row instead; lanes left or right of the
plane are masked off, whole vectors inside it run in a loop), stored through the
epilogue. The copy in, the flat loop's dropped columns and the copy out are gone: at
batch 1, one thread (alone, median thread CPU time), mnasnet1_0's 32-channel 112 x 112
layer went from 0.31 to 0.15 ms, mobilenet_v2's 144-channel 56 x 56 from 0.31 to
0.19 ms, 960 x 7 x 7 from 0.051 to 0.032 ms; at stride 2, mobilenet_v2's 96-channel
112 x 112 from 0.42 to 0.24 ms, 144 x 56 x 56 from 0.12 to 0.08 ms. BLOCK_ROWS output
rows are computed together, so a loaded input row serves every one of them that reads
it, and a row shorter than half a vector takes narrower vectors (`row_lanes`: a 7-wide
row fills 7 of 8 lanes, not 7 of 16). Alone, one thread (minimum of cycle counters),
against one row at a time on full vectors: 5x5 over 1152 x 7 x 7 96 -> 43 us, 480 x
14 x 14 98 -> 65, 120 x 28 x 28 97 -> 66, 576 x 14 x 14 at stride 2 48 -> 32; 3x3 over
960 x 7 x 7 26 -> 19, 384 x 14 x 14 37 -> 26 us.

3-d depthwise convolutions and half kinds stay on the general direct loop. Threads
share the (image, filter) planes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from ....graph.types import ElemKind
from ..codegen.kinds import F32, I32, i64, load, store
from ..codegen.loops import loop
from ..codegen.module import KernelContext, Step
from ..codegen.target import host_vectors
from .epilogue import stacked_epilogue
from .gemm import fma, load_vector, masked_load, offset, splat, store_vector, vector_type
from .window import Dim, window_dims

MAX_TAPS = 81
"""Taps unrolled into the loop body at most (9 x 9): larger filters take the general loop."""
BLOCK_ROWS = 4
"""Output rows `_emit_rows` computes together, each loaded (or shuffled) input row vector serving all
of them whose taps read it. One row at a time, a 5x5 filter loaded 25 vectors for 25 FMAs (line-split
loads, the load ports the bound); 4 rows load 8 x 5 for 100 FMAs, and with the filter's 25 taps
in registers 4 accumulators still fit 32 (a 16-register AVX2 host spills taps either way). Alone,
one thread, minimum of cycle counters, 1 / 2 / 4 / 8 rows: 5x5 480 channels 14 x 14 106 / 79 / 65 / 60 us,
120 x 28 x 28 92 / 74 / 67 / 65; 3x3 384 x 14 x 14 39 / 27 / 27 / 27; AVX2 code 4 rows against 1:
5x5 14 x 14 163 -> 110 us, 3x3 14 x 14 52 -> 39."""
EPILOGUE_VECTORS = 4
"""Vectors of a block of output rows from which a costly epilogue (kernel's subroutine, epilogue.py)
runs per block, while the block is in L1; below, once over all the thread's planes (in L2): a call per
4 rows of a 7 x 7 or 14 x 14 plane cost 1152 x 7 x 7 and 672 x 14 x 14 SiLU layers 1.4-2.3x the
cycles of the epilogue in registers, the call's overhead and the taps' registers saved around it."""
MAX_STRIDE = 4
"""Largest stride taken here (its square is the number of phase planes)."""


@dataclass(frozen=True)
class Phases:
    """The phase planes of a padded input plane for one conv's rows and columns (module doc)."""

    rows: Dim
    cols: Dim

    @property
    def height(self) -> int:
        """Hq: rows of a phase plane."""
        return -(-(self.rows.size + self.rows.begin + self.rows.end) // self.rows.stride)

    @property
    def width(self) -> int:
        """Wq: columns of a phase plane."""
        return -(-(self.cols.size + self.cols.begin + self.cols.end) // self.cols.stride)

    @property
    def plane(self) -> int:
        return self.height * self.width

    @property
    def size(self) -> int:
        """Floats of all phase planes."""
        return self.rows.stride * self.cols.stride * self.plane

    @property
    def span(self) -> int:
        """Length of the flat loop: the last output row ends at (H_out - 1) * Wq + W_out."""
        return (self.rows.out - 1) * self.width + self.cols.out

    def tap(self, ky: int, kx: int) -> int:
        """Where tap (ky, kx) of output 0 reads, as an offset into the phase planes."""
        dy, dx = ky * self.rows.dilation, kx * self.cols.dilation
        phase = (dy % self.rows.stride) * self.cols.stride + dx % self.cols.stride
        return phase * self.plane + (dy // self.rows.stride) * self.width + dx // self.cols.stride

    def column_runs(self) -> tuple[int, int, list[tuple[int, int]]]:
        """(j_lo, j_hi, edges): phase columns j in [j_lo, j_hi) take every column phase from the
        input row (input column sc j + px - pad); `edges` are the other (px, j) inside the input."""
        s, pad, width = self.cols.stride, self.cols.begin, self.cols.size
        low = -(-pad // s)
        high = max(low, (width - s + pad) // s + 1)
        edges = [(px, j) for j in range(self.width) for px in range(s)
                 if not low <= j < high and 0 <= s * j + px - pad < width]
        return low, high, edges


def phases_of(instr: Any) -> Phases | None:
    """The phase planes of a float32 depthwise 2-d (or 1-d) convolution this kernel takes, else None."""
    if instr.types[0].elem is not ElemKind.FLOAT32:
        return None
    lead, rows, cols = window_dims(instr)
    channels = instr.input.type.shape[1]
    if (lead.size, lead.kernel) != (1, 1) or channels // instr.group != 1:
        return None
    if max(rows.stride, cols.stride) > MAX_STRIDE or rows.kernel * cols.kernel > MAX_TAPS:
        return None
    return Phases(rows, cols)


def applies(instr: Any) -> bool:
    return phases_of(instr) is not None


def emit_depthwise(ctx: KernelContext, step: Step) -> None:
    """The kernel of the module doc for `step`'s Conv instruction and its stacked epilogue."""
    instr = step.instrs[0]
    builder = ctx.builder
    phases = phases_of(instr)
    rows, cols = phases.rows, phases.cols
    if takes_rows(cols):
        _emit_rows(ctx, step, rows, cols)
        return
    images, channels = instr.input.type.shape[:2]
    filters = instr.filter.type.shape[0]
    per_channel = filters // channels  # the depth multiplier
    plane_in, plane_out = rows.size * cols.size, rows.out * cols.out
    lanes = host_vectors().lanes
    vectors = -(-phases.span // lanes)
    # The flat loop runs whole vectors: its last one reads up to a vector past the planes (zeroed
    # with them) and writes up to a vector past the span, both dropped.
    planes = phases.size + lanes
    per_thread = planes + vectors * lanes
    x, out, w = ctx.address(instr.input), ctx.address(instr.operands[0]), ctx.address(instr.filter)
    b = ctx.address(instr.bias) if instr.bias is not None else None
    scratch = ctx.thread_scratch(per_thread * 4)
    xp, y = scratch, offset(builder, scratch, planes)
    zero = ir.Constant(F32, 0.0)
    start, stop = ctx.share(images * filters)
    with loop(builder, planes, name="zero") as i:
        store(builder, zero, xp, ElemKind.FLOAT32, i)
    taps = [phases.tap(t0, t1) for t0 in range(rows.kernel) for t1 in range(cols.kernel)]
    epilogue = stacked_epilogue(ctx, step)
    with loop(builder, stop, start, name="nm") as nm:
        n, m = builder.udiv(nm, i64(filters)), builder.urem(nm, i64(filters))
        channel = builder.add(builder.mul(n, i64(channels)), builder.udiv(m, i64(per_channel)))
        _copy_in(ctx, phases, offset(builder, x, builder.mul(channel, i64(plane_in))), xp)
        first = builder.mul(m, i64(len(taps)))
        weights = [splat(builder, load(builder, w, ElemKind.FLOAT32, builder.add(first, i64(k))), lanes)
                   for k in range(len(taps))]
        bias = splat(builder, load(builder, b, ElemKind.FLOAT32, m) if b is not None else zero, lanes)
        with loop(builder, vectors, name="i") as v:
            i = builder.mul(v, i64(lanes))
            total = bias
            for weight, shift in zip(weights, taps):
                tap = load_vector(ctx, offset(builder, xp, builder.add(i, i64(shift))), lanes, lanes)
                total = fma(ctx, weight, tap, total)
            store_vector(ctx, total, offset(builder, y, i), lanes, lanes)
        _copy_out(ctx, phases, y, out, builder.mul(nm, i64(plane_out)), epilogue)
    if epilogue is not None and epilogue.stored is not None:  # a costly one: once, over the planes stored
        _over_planes(ctx, epilogue, out, plane_out, (start, stop))


def _copy_in(ctx: KernelContext, phases: Phases, source: ir.Value, xp: ir.Value) -> None:
    """One input plane into the interior of the phase planes at `xp`."""
    builder = ctx.builder
    rows, cols = phases.rows, phases.cols
    low, high, edges = phases.column_runs()
    stride = cols.stride
    with loop(builder, rows.size, name="r") as r:
        padded = builder.add(r, i64(rows.begin))
        phase_row = builder.urem(padded, i64(rows.stride))
        row_at = builder.add(builder.mul(builder.mul(phase_row, i64(stride)), i64(phases.plane)),
                             builder.mul(builder.udiv(padded, i64(rows.stride)), i64(phases.width)))
        source_row = offset(builder, source, builder.mul(r, i64(cols.size)))

        def move(px: int, j: ir.Value) -> None:
            column = builder.add(builder.mul(j, i64(stride)), i64(px - cols.begin))
            target = builder.add(builder.add(row_at, i64(px * phases.plane)), j)
            store(builder, load(builder, source_row, ElemKind.FLOAT32, column), xp, ElemKind.FLOAT32, target)

        if high > low:
            with loop(builder, high, low, name="c") as j:
                for px in range(stride):
                    move(px, j)
        for px, j in edges:
            move(px, i64(j))


def _copy_out(ctx: KernelContext, phases: Phases, y: ir.Value, out: ir.Value, plane: ir.Value,
              epilogue: Any) -> None:
    """The valid columns of each row of y to the output plane starting at element `plane`, a
    vector at a time through the stacked epilogue."""
    builder = ctx.builder
    lanes = host_vectors().lanes
    width = phases.cols.out
    whole, edge = divmod(width, lanes)

    inline = epilogue is not None and epilogue.stored is None

    def move(row_in: ir.Value, row_out: ir.Value, first: ir.Value, count: int) -> None:
        vector = load_vector(ctx, offset(builder, row_in, first), lanes, count)
        at = builder.add(row_out, first)
        if inline:
            vector = epilogue(vector, at, count)
        store_vector(ctx, vector, offset(builder, out, at), lanes, count)

    with loop(builder, phases.rows.out, name="oh") as oh:
        row_in = offset(builder, y, builder.mul(oh, i64(phases.width)))
        row_out = builder.add(plane, builder.mul(oh, i64(width)))
        if whole:
            with loop(builder, whole, name="ov") as v:
                move(row_in, row_out, builder.mul(v, i64(lanes)), lanes)
        if edge:
            move(row_in, row_out, i64(whole * lanes), edge)


def _over_planes(ctx: KernelContext, epilogue: Any, out: ir.Value, plane: int,
                 planes: tuple[ir.Value, ir.Value]) -> None:
    """A costly epilogue in place over output planes [start, stop), stored one after another."""
    builder = ctx.builder
    first = builder.mul(planes[0], i64(plane))
    epilogue.over(builder, out, first, 1, builder.sub(builder.mul(planes[1], i64(plane)), first), plane)


def takes_rows(cols: Dim) -> bool:
    """Whether `_emit_rows` computes a convolution of these columns: stride 1 or 2. At stride 2 a
    tap's vector is the even (or odd) lanes of two consecutive loads, one shuffle each; once a
    shuffled row serves a block of output rows (BLOCK_ROWS), 5 taps a row beat the phase planes
    too (alone, one thread, median of cycle counters: 576 channels 14 -> 7 47.5 -> 31.8 us,
    240 28 -> 14 60.8 -> 53.4 us; AVX2 code 58.6 -> 52.1, 78.0 -> 75.4 us)."""
    return cols.stride <= 2


def _emit_rows(ctx: KernelContext, step: Step, rows: Dim, cols: Dim) -> None:
    """A depthwise convolution straight from the input plane to the output, a block of output rows
    a vector of columns at a time: every tap of a vector is one load from an input row (at column
    stride 2, two loads and a shuffle keeping every other element, shared by a tap and the next
    one), and a load serves every output row of the block whose taps read that input row; a row
    above or below the plane reads a row of zeros instead, the lanes left or right of it are
    masked off."""
    instr = step.instrs[0]
    builder = ctx.builder
    images, channels = instr.input.type.shape[:2]
    filters = instr.filter.type.shape[0]
    per_channel = filters // channels
    plane_in, plane_out = rows.size * cols.size, rows.out * cols.out
    lanes = row_lanes(cols)
    step_ = cols.stride
    x, out, w = ctx.address(instr.input), ctx.address(instr.operands[0]), ctx.address(instr.filter)
    b = ctx.address(instr.bias) if instr.bias is not None else None
    zeros = ctx.thread_scratch(cols.size * 4)
    zero = ir.Constant(F32, 0.0)
    with loop(builder, cols.size, name="zero") as i:
        store(builder, zero, zeros, ElemKind.FLOAT32, i)
    epilogue = stacked_epilogue(ctx, step)
    inline = epilogue is not None and epilogue.stored is None
    per_block = not inline and epilogue is not None and \
        BLOCK_ROWS * cols.out >= EPILOGUE_VECTORS * host_vectors().lanes
    picks = [ir.Constant(ir.VectorType(I32, lanes), [step_ * lane + phase for lane in range(lanes)])
             for phase in range(step_)]

    def load_start(first: int, kx: int) -> tuple[int, int]:
        """(input column of the first load of tap kx for the output vector at column `first`, phase):
        the tap's vector is lanes phase, phase + stride, ... of the loads from there."""
        column = cols.input_position(first, kx)
        return column - column % step_, column % step_

    def masks(first: int, kx: int) -> list[list[bool]]:
        """Per load of tap kx at output column `first`, the lanes inside the row."""
        begin = load_start(first, kx)[0]
        return [[0 <= begin + part * lanes + lane < cols.size for lane in range(lanes)] for part in range(step_)]

    vectors = -(-cols.out // lanes)
    interior = [v for v in range(vectors) if (v + 1) * lanes <= cols.out and
                all(all(all(mask) for mask in masks(v * lanes, kx)) for kx in range(cols.kernel))]
    low, high = (interior[0], interior[-1] + 1) if interior else (0, 0)
    start, stop = ctx.share(images * filters)
    with loop(builder, stop, start, name="nm") as nm:
        n, m = builder.udiv(nm, i64(filters)), builder.urem(nm, i64(filters))
        channel = builder.add(builder.mul(n, i64(channels)), builder.udiv(m, i64(per_channel)))
        plane = offset(builder, x, builder.mul(channel, i64(plane_in)))
        first_tap = builder.mul(m, i64(rows.kernel * cols.kernel))
        weights = [[splat(builder, load(builder, w, ElemKind.FLOAT32,
                                        builder.add(first_tap, i64(ky * cols.kernel + kx))), lanes)
                    for kx in range(cols.kernel)] for ky in range(rows.kernel)]
        bias = splat(builder, load(builder, b, ElemKind.FLOAT32, m) if b is not None else zero, lanes)

        def output_rows(first_row: ir.Value, count: int) -> None:
            """Output rows first_row .. first_row + count - 1."""
            # Input row `d` of the block is first_row x stride + d - pad; output row r reads the
            # block's rows r x stride + ky x dilation.
            reads = [[r * rows.stride + ky * rows.dilation for ky in range(rows.kernel)] for r in range(count)]
            sources = {}
            for d in sorted({d for row in reads for d in row}):
                ih = builder.add(builder.mul(first_row, i64(rows.stride)), i64(d - rows.begin))
                row = offset(builder, plane, builder.mul(ih, i64(cols.size)))
                sources[d] = builder.select(builder.icmp_unsigned("<", ih, i64(rows.size)), row, zeros)
            row_outs = [builder.add(builder.mul(nm, i64(plane_out)),
                                    builder.mul(builder.add(first_row, i64(r)), i64(cols.out))) for r in range(count)]

            def vector(first: ir.Value, edge: int | None, width: int) -> None:
                """The output vectors at column `first` of the rows: a runtime value in the interior
                loop (edge None), else the compile-time column `edge` (its loads masked)."""
                totals = [bias] * count
                for d, source in sources.items():
                    readers = [(r, row.index(d)) for r, row in enumerate(reads) if d in row]  # (r, ky)
                    loaded: dict[int, list[ir.Value]] = {}
                    for kx in range(cols.kernel):
                        begin, phase = load_start(0, kx)
                        if begin not in loaded:
                            column = builder.add(builder.mul(first, i64(step_)), i64(begin))
                            parts = []
                            for part in range(step_):
                                pointer = builder.gep(source, [builder.add(column, i64(part * lanes))],
                                                      source_etype=F32)
                                mask = masks(edge, kx)[part] if edge is not None else None
                                parts.append(builder.load(pointer, typ=vector_type(lanes), align=4)
                                             if mask is None or all(mask) else masked_load(ctx, pointer, mask, lanes))
                            loaded[begin] = parts
                        parts = loaded[begin]
                        tap = parts[0] if step_ == 1 else builder.shuffle_vector(parts[0], parts[1], picks[phase])
                        for r, ky in readers:
                            totals[r] = fma(ctx, weights[ky][kx], tap, totals[r])
                for r, total in enumerate(totals):
                    at = builder.add(row_outs[r], first)
                    if inline:
                        total = epilogue(total, at, width)
                    store_vector(ctx, total, offset(builder, out, at), lanes, width)

            for v in range(vectors):
                if low <= v < high:
                    if v == low:
                        with loop(builder, high, low, name="ow") as inner:
                            vector(builder.mul(inner, i64(lanes)), None, lanes)
                    continue
                vector(i64(v * lanes), v * lanes, min(lanes, cols.out - v * lanes))
            if per_block:  # a costly one: once, over the rows just stored
                epilogue.over(builder, out, row_outs[0], 1, count * cols.out, count * cols.out)

        blocks, tail = divmod(rows.out, BLOCK_ROWS)
        if blocks:
            with loop(builder, blocks, name="oh") as ob:
                output_rows(builder.mul(ob, i64(BLOCK_ROWS)), BLOCK_ROWS)
        if tail:
            output_rows(i64(blocks * BLOCK_ROWS), tail)
    if epilogue is not None and not inline and not per_block:  # a costly one: once, over the planes stored
        _over_planes(ctx, epilogue, out, plane_out, (start, stop))


def row_lanes(cols: Dim) -> int:
    """Lanes of `_emit_rows`' vectors: the host's, or fewer (at least 4) where an output row is
    shorter, so a 7-wide row is not a third of a 16-lane vector."""
    lanes = host_vectors().lanes
    while lanes > 4 and lanes // 2 >= cols.out:
        lanes //= 2
    return lanes


