"""Convolution epilogues (the NPU's operator stacking), the roofline bound and `compile --report`.

A residual block whose branches meet in an Add, with ReLUs and the Rescales the quantizer places to
bring both branches to the Add's type, must compile into convolution layers only (the chain runs on
each tile in the scratchpad) and still match the reference evaluator bit for bit in checked mode.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import glowsdk
from glowsdk import numerics
from glowsdk.backends.npu.epilogue import (MAX_COUNT16, AddTensor, Clamp8, Lut8, Lut16, Rescale8, compact, epilogue_specs,
                                       requant_specs, vector_passes)
from glowsdk.backends.npu.instructions import CONFIG_REQUANT, LUT_LOAD, LUT_VADD_LUT, REQUANT_LUT, VADD_LUT
from glowsdk.backends.npu.pipeline import LOADED, PREFETCH, TABLE
from glowsdk.cli.main import main
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from isa import PRESETS
from isa.roofline import from_metadata
from sim.binding import run_binary

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def residual_block(batch: int = 1, width: int = 12):
    b = NetBuilder((batch, 16, width, width))
    stem = b.conv("x", 16, 16)
    branch = b.conv(b.conv(stem, 16, 8, 1, 0), 8, 16, relu=False)
    skip = b.conv(stem, 16, 16, 1, 0, relu=False)
    joined = b.node("Relu", [b.node("Add", [branch, skip])])
    second = b.node("Relu", [b.node("Add", [b.conv(joined, 16, 16, relu=False), joined])])
    return b.network(b.conv(second, 16, 4, 1, 0, relu=False))


@pytest.mark.parametrize("config,batch", [("edge", 1), ("default", 2)])
def test_residual_chains_fuse_into_the_convolutions_bit_exact(config, batch):
    npu = assert_bit_exact(residual_block(batch), config=config)
    kinds = [layer.kind for layer in npu.compiled.layers]
    graph = {n.kind for n in npu.compiled.function.nodes}
    assert {"Add", "Rescale"} <= graph  # the quantized graph has them ...
    assert "Add" not in kinds and "Rescale" not in kinds  # ... the binary runs them inside convolution layers
    fused = [op for layer in npu.compiled.layers if layer.kind == "Conv" for op in layer.body.epilogue]
    assert any(type(op).__name__ == "AddTensor" for op in fused)
    # every Rescale of a chain runs as a table lookup (one vector pass), none as VSUBI + REQUANT
    assert not any(isinstance(op, Rescale8) or isinstance(getattr(op, "pre", None), Rescale8) for op in fused)
    assert any(isinstance(op, Lut8) or isinstance(getattr(op, "post", None), Lut8) for op in fused)
    # the ReLU after each Add rides with it: one VADD_LUT, no pass of its own
    assert all(isinstance(op.post, Lut8) for op in fused if isinstance(op, AddTensor))
    mnemonics = [i.mnemonic for i in npu.compiled.binary.instructions]
    assert "VADD_LUT" in mnemonics and "VADD" not in mnemonics


@pytest.mark.parametrize("width", [12, 7])
def test_strided_and_batched_1x1_convolutions_read_views_bit_exact(width):
    # a downsampling block at batch 2: its strided 1x1 reads every other pixel of every other row, and where the
    # images lie one after another the 1x1s tile across both of them (the strided one's subsampled rows do only
    # for an even width: 7 rows subsample to 4, of which the last is not followed by the next image's first)
    b = NetBuilder((2, 16, width, width))
    stem = b.conv("x", 16, 16)
    branch = b.conv(b.conv(stem, 16, 8, 3, 1, 2), 8, 32, 1, 0, relu=False)
    skip = b.conv(stem, 16, 32, 1, 0, 2, relu=False)
    network = b.network(b.conv(b.node("Relu", [b.node("Add", [branch, skip])]), 32, 8, 1, 0, relu=False))
    npu = assert_bit_exact(network, config="default")
    out = -(-width // 2)
    ones = [layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and layer.body.shape.kh == 1]
    assert len(ones) == 3 and all(body.shape.stride == (1, 1) for body in ones)
    strided = next(body for body in ones if body.shape.channels == 16)
    merged = [body.source.batch == 1 for body in ones]
    assert merged == [width % 2 == 0 or body is not strided for body in ones]
    assert [body.shape.out_height for body in ones] == [2 * out if m else out for m in merged]
    assert strided.shape.width == out and strided.workload().input_bytes == 2 * 16 * width * width + 2 * 32 * out * out


def test_a_convolution_loads_the_first_weights_of_the_next_before_the_barrier():
    npu = assert_bit_exact(residual_block(), config="default")  # checked mode: no race across the barrier
    layers, binary = npu.compiled.layers, npu.compiled.binary
    fetched = [k for k, layer in enumerate(layers) if getattr(layer.body, "prefetched", None) is not None]
    assert fetched
    for k in fetched:
        body, before, mine = layers[k].body, binary.debug[k - 1], binary.debug[k]
        rows = body.prefetched_input[1] if body.prefetched_input else 0  # its first input rows too (prefetch.py)
        kept = int(body.kept_input is not None)  # or a signal that the rows it reads are kept (kept_inputs.py)
        signals = [i for i in binary.instructions[before.start:before.stop]
                   if i.signal_count and i.signal_sem == PREFETCH]
        loads = [i for i in signals if i.mnemonic == "LOAD"]
        assert sorted(i.mnemonic for i in signals) == ["CONFIG_STORE"] * kept + ["LOAD"] * (1 + rows)
        assert loads[0].sram == body.prefetched
        # its first product waits for them, before the barrier if it reads nothing else (handoff.py)
        waits = [i for i in binary.instructions[before.start if rows or kept else mine.start:mine.stop]
                 if i.wait_count and i.wait_sem == PREFETCH and i.wait_count == 1 + rows + kept]
        assert [i.mnemonic for i in waits][-1:] == ["CONFIG_MATMUL"]
        assert layers[k - 1].body.spad_end() <= loads[0].sram and body.spad_end() <= loads[0].sram
    # a convolution's prologue (bias, requantize tables: the vector engine's) loads after its first step's input
    # (where the layer before did not load or keep all of it)
    for layer, ranged in zip(layers, binary.debug):
        body = layer.body
        if layer.kind == "Conv" and not (body.prefetched_input and len(body.first_chunks()) < 2 or body.kept_input):
            loads = [i for i in binary.instructions[ranged.start:ranged.stop] if i.mnemonic == "LOAD"]
            assert loads[0].signal_sem == LOADED and any(i.signal_sem == TABLE for i in loads[1:])


def test_a_global_pool_after_a_residual_add_in_every_output_channel_tile_bit_exact():
    # each output-channel tile of the row tile loads its residual rows, which the pooled store (one row) must not
    # cut short for the next (resnet50's last block: 7 x 7, its channels in several tiles)
    b = NetBuilder((1, 64, 7, 7))
    stem = b.conv("x", 64, 512, 1, 0)
    joined = b.node("Relu", [b.node("Add", [b.conv(stem, 512, 512, 1, 0, relu=False), stem])])
    npu = assert_bit_exact(b.network(b.node("Flatten", [b.node("AveragePool", [joined], kernel_shape=[7, 7])])),
                           config="default")
    [pooled] = [layer.body for layer in npu.compiled.layers if getattr(layer.body, "pool", None)]
    assert pooled.epilogue and pooled.tiling.n < pooled.shape.out_channels


@pytest.mark.parametrize("config,width,per_channel,split", [("edge", 90, False, False), ("default", 175, True, True)])
def test_a_3x3_stride_2_max_pool_is_done_by_the_convolution_before_it_bit_exact(config, width, per_channel, split):
    # SqueezeNet's stem: each tile maxes a window's rows in the accumulator and requantizes only the pooled rows,
    # then pools them across; where the vector engine is the busiest (default), each tile computes its even and odd
    # columns apart and maxes them across first, so only the pooled pixels are maxed down and requantized (no
    # POOL). The full image never reaches DRAM (even and odd convolution heights and widths; on default, several
    # output-channel tiles and per-channel requantization)
    b = NetBuilder((1, 3, width, width))
    pooled = b.node("MaxPool", [b.conv("x", 3, 64, 3, 0, 2)], kernel_shape=[3, 3], strides=[2, 2])
    npu = assert_bit_exact(b.network(b.conv(pooled, 64, 8, 1, 0, relu=False)), config=config,
                           per_channel=per_channel)
    assert [layer.kind for layer in npu.compiled.layers if layer.kind != "Copy"] == ["Conv", "Conv"]
    stem = npu.compiled.layers[0].body
    assert stem.window and stem.split == split and stem.workload().output_bytes == 64 * ((width - 3) // 4) ** 2
    assert ("POOL" in [i.mnemonic for i in npu.compiled.binary.instructions]) != split


@pytest.mark.parametrize("config,size,kernel,stride,pads,channels,per_channel,tiles", [
    ("edge", 40, 7, 2, [1, 1, 1, 1], 24, False, [15, 5]), ("default", 48, 3, 1, [1, 1, 1, 1], 24, False,
                                                          [11, 12, 12, 12, 1]),
    ("edge", 21, 3, 1, [1, 1, 0, 0], 24, False, [13, 8]), ("edge", 10, 3, 1, [1, 1, 1, 1], 24, False, [10]),
    ("edge", 16, 3, 1, [1, 1, 1, 1], 64, True, None)])
def test_a_max_pool_padded_on_top_and_left_is_done_by_the_convolution_before_it_bit_exact(
        config, size, kernel, stride, pads, channels, per_channel, tiles):
    # ResNet's stem: the pool pads one row on top and one column on the left (below and on the right its padding,
    # if any, is read by no window). Each tile maxes row 0 as if it were repeated above it (a repeated row leaves a
    # maximum as the padding does), POOL pads the columns, and the first tile has one row less, so that every later
    # one starts where a window does; one tile holds a small image whole; 64 channels on edge take several
    # output-channel tiles, each with its own running maximum, per-channel requantized
    b = NetBuilder((1, 3, size, size))
    pooled = b.node("MaxPool", [b.conv("x", 3, channels, kernel, kernel // 2, stride)], kernel_shape=[3, 3],
                    strides=[2, 2], pads=pads)
    npu = assert_bit_exact(b.network(b.conv(pooled, channels, 8, 1, 0, relu=False)), config=config,
                           per_channel=per_channel)
    assert [layer.kind for layer in npu.compiled.layers if layer.kind != "Copy"] == ["Conv", "Conv"]
    stem = npu.compiled.layers[0].body
    side = (size // stride - 2) // 2 + 1
    assert stem.window and stem.window_pad == 1 and stem.workload().output_bytes == channels * side * side
    sizes = [end - start for start, end in stem.row_tiles()]
    assert sizes == tiles if tiles else stem.tiling.n < channels and len(sizes) > 1 and sizes[0] % 2 == 1


@pytest.mark.parametrize("config,width", [("edge", 29), ("default", 56)])
def test_a_max_pool_over_a_concat_is_done_by_each_convolution_that_writes_a_part_bit_exact(config, width):
    # SqueezeNet's fire module before a pool: a max pool is per channel, so each expansion pools its own slice of
    # the Concat (through a Rescale to the Concat's type where the quantizer places one); odd and even heights,
    # tiles of several row pairs, and the pooled image alone reaches DRAM
    b = NetBuilder((1, 16, width, width))
    squeeze = b.conv("x", 16, 8, 1, 0)
    joined = b.node("Concat", [b.conv(squeeze, 8, 32, 1, 0), b.conv(squeeze, 8, 32, 3, 1)], axis=1)
    pooled = b.node("MaxPool", [joined], kernel_shape=[3, 3], strides=[2, 2])
    npu = assert_bit_exact(b.network(b.conv(pooled, 64, 8, 1, 0, relu=False)), config=config)
    assert [layer.kind for layer in npu.compiled.layers if layer.kind != "Copy"] == ["Conv"] * 4
    parts = [layer.body for layer in npu.compiled.layers[1:3]]
    side = (width - 1) // 2
    assert all(part.window and part.workload().output_bytes == 32 * side * side for part in parts)
    assert parts[0].result.tensor.offset + 32 == parts[1].result.tensor.offset


def test_a_run_of_unary_steps_is_one_table_of_their_exact_values():
    rescale, clamp = Rescale8(1518500250, 1, 5, -7), Clamp8(-7, 100)
    chain = compact([rescale, clamp, AddTensor(None, 3, Rescale8(1 << 30, 0, 2, 0)), clamp])
    assert [type(op) for op in chain] == [Lut8, AddTensor] and isinstance(chain[1].pre, Lut16)
    q = np.arange(-128, 128)
    step = np.clip(numerics.requantize(q - 5, 1518500250, 1, -7).astype(np.int64), -7, 100)  # the two instructions
    # the Add's zero point is folded into the table before it (every entry minus 3 is still an int8): one VADD
    assert chain[1].folded
    np.testing.assert_array_equal(np.frombuffer(chain[0].table, np.int8), step - 3)
    # the clamp after the Add is its post table, and the operand's Rescale its int16 table: REQUANT_LUT with the
    # leading table, then one LUT_VADD_LUT
    np.testing.assert_array_equal(np.frombuffer(chain[1].post.table, np.int8), np.clip(q, -7, 100))
    np.testing.assert_array_equal(np.frombuffer(chain[1].pre.table, "<i2"), numerics.requantize(q - 2, 1 << 30, 0, 0))
    assert vector_passes(chain) == 1 + 1
    wide = compact([Rescale8(1 << 30, -1, 0, 0), AddTensor(None, -100)])  # 127 + 100 is no int8: VADD, VSUBI
    assert not wide[1].folded and wide[1].post is None and vector_passes(wide) == 1 + 2
    # followed by a table, the unfolded Add subtracts its zero point in VADD_LUT's offset: one pass
    relu = compact([Rescale8(1 << 30, -1, 0, 0), AddTensor(None, -100), Clamp8(-100, 127)])
    add = relu[1]
    assert not add.folded and vector_passes(relu) == 1 + 1
    assert epilogue_specs(add, 0x40, 0, 2, 3, 0x80, {id(add.post): 0x400}) == [
        LUT_LOAD(src=0x400), VADD_LUT(dst=0x40, src1=0x40, src2=0x80, count=6, offset=100)]


def test_an_activation_after_a_convolution_rides_in_its_requantize_pass_bit_exact():
    b = NetBuilder((1, 8, 12, 12))
    wide = b.node("HardSigmoid", [b.conv("x", 8, 32, 1, 0, relu=False)])
    depthwise = b.node("Conv", [wide, b.weight((32, 1, 3, 3)), b.weight((32,))], pads=[1] * 4, group=32)
    network = b.network(b.conv(b.node("Sigmoid", [depthwise]), 32, 8, 1, 0, relu=False))
    npu = assert_bit_exact(network, config="default")
    # each table is looked up by the REQUANT_LUT of the layer before it: no LUT pass, no layer of its own
    assert [layer.kind for layer in npu.compiled.layers][:3] == ["Conv"] * 3  # then the output's layout Copy
    assert "TableLookup" not in [layer.kind for layer in npu.compiled.layers]
    assert type(npu.compiled.layers[1].body).__name__ == "DepthwiseLayer"
    mnemonics = [i.mnemonic for i in npu.compiled.binary.instructions]
    assert "REQUANT_LUT" in mnemonics and "LUT" not in mnemonics
    for layer, ranged in zip(npu.compiled.layers[:2], npu.compiled.binary.debug):
        assert "REQUANT_LUT" in [i.mnemonic for i in npu.compiled.binary.instructions[ranged.start:ranged.stop]]
    config = CONFIG_REQUANT(multiplier=1, shift=0, zero_point=0, clamp_lo=-128, clamp_hi=127, per_channel=0,
                            table=0, bias_row=0, bias=0)
    table = Lut8(bytes(256))
    assert requant_specs(config, 0x40, 0, 2, 3, (table,), {id(table): 0x400}) == (
        [config, LUT_LOAD(src=0x400), REQUANT_LUT(dst=0x40, src=0, rows=2, cols=3)], ())


def test_an_add_zero_point_rides_in_the_offset_of_its_add_lut_whatever_the_table_after_it():
    relu = Lut8.of([Rescale8(1 << 30, 0, -41, -128), Clamp8(-128, 127)])  # the Add's type to a ReLU'd one
    identity = Lut8((np.arange(256) - 128).astype(np.int8).tobytes())  # flat nowhere
    q, x = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    for zero, after in ((-41, relu), (5, identity)):
        chain = compact([AddTensor(None, zero), after])  # no table before the Add to take its zero point
        add = chain[0]
        assert len(chain) == 1 and not add.folded and vector_passes(chain) == 1 + 1  # REQUANT, VADD_LUT
        load, fused = epilogue_specs(add, 0x40, 0, 1, 1, 0x80, {id(add.post): 0x400})
        table = np.frombuffer(after.table, np.int8).astype(np.int64)
        want = table[np.clip(q + x - zero, -128, 127) + 128]  # VADD and VSUBI, then the table
        post = np.frombuffer(add.post.table, np.int8).astype(np.int64)
        assert load == LUT_LOAD(src=0x400) and fused.mnemonic == "VADD_LUT"
        np.testing.assert_array_equal(post[np.clip(q + x + fused.fields["offset"], -128, 127) + 128], want)


def test_roofline_bound_of_one_convolution_is_the_closed_form():
    b = NetBuilder((1, 32, 14, 14))
    network = b.network(b.conv("x", 32, 64, 3, 1, 1, relu=False))
    npu = glowsdk.compile(network, "npu", quantization=QuantizationConfig(
        collect_profile(network, calibration_random(network, 2))))
    config = PRESETS["default"]
    binary = npu.compiled.binary
    works = from_metadata(binary.metadata, len(binary.debug))
    [(layer, conv)] = [(r, w) for r, w in zip(binary.debug, works) if w is not None]
    assert layer.kind == "Conv"
    macs = 14 * 14 * 64 * 3 * 3 * 32
    moved = 32 * 14 * 14 + 64 * 32 * 3 * 3 + 4 * 64 + 64 * 14 * 14  # input, int8 weights, int32 bias, output
    assert conv.macs == macs and conv.bytes == moved and conv.unit == "array"
    assert conv.cycles(config) == max(macs / (config.array_rows * config.array_cols),
                                      moved / config.dram_bytes_per_cycle)
    # the simulator's bound is this one: the layer's row, and the total (every other layer is free)
    result = run_binary(binary, config, {}).result
    row = next(r for r in result.layer_rows() if r.name == layer.name)
    assert row.roofline_cycles == conv.cycles(config) and result.total_row().roofline_cycles == conv.cycles(config)
    assert {r.bound for r in result.layer_rows() if r.name != layer.name} <= {"free"}


def test_fused_residual_adds_are_inputs_of_the_convolution_not_layers():
    # the bound counts the layers the binary runs: the residual Adds run in convolution epilogues, so the
    # network's bound is the sum over its convolutions, each reading its residual operand once
    npu = glowsdk.compile(residual_block(), "npu", quantization=QuantizationConfig(
        collect_profile(residual_block(), calibration_random(residual_block(), 2))))
    binary = npu.compiled.binary
    works = from_metadata(binary.metadata, len(binary.debug))
    layers = npu.compiled.layers
    assert [layer.kind for layer, w in zip(layers, works) if w is not None] == ["Conv"] * 6
    for layer, work in zip(layers, works):
        if work is not None:
            adds = sum(type(op).__name__ == "AddTensor" for op in layer.body.epilogue)
            s = layer.body.shape
            assert work.input_bytes == s.channels * s.height * s.width + adds * work.output_bytes


def test_compile_report_lists_each_layer_against_the_simulator(capsys):
    model = str(glowsdk.zoo.digits_model_path())
    assert main(["compile", model, "--input-shape", "image=1x1x8x8", "--target", "npu", "--calibration-random", "2",
                 "--config", "edge", "--report"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()]
    rows = [row for row in rows if len(row) > 3 and row[2] in ("conv", "conv__1", "matmul")]
    assert len(rows) == 3 and all("tile" in row for row in rows)
    # each named first after the model's own node (ONNX name, op type), the internal layer name after
    matrix_nodes = {(n.name or n.output[0], n.op_type) for n in onnx.load(model).graph.node
                    if n.op_type in ("Conv", "Gemm", "MatMul")}
    assert {(row[0], row[1]) for row in rows} == matrix_nodes
    total = [line for line in out.splitlines() if line.startswith("total:")]
    assert len(total) == 1 and "roofline bound" in total[0] and "'edge'" in total[0]
    cycles = int(total[0].split()[1].replace(",", ""))
    assert cycles > 0 and np.isfinite(cycles)


def test_report_needs_the_npu_target(capsys):
    assert main(["compile", "squeezenet", "--target", "interpreter", "--report"]) == 2
    assert "--report" in capsys.readouterr().err


def test_a_rescaled_residual_operand_is_looked_up_in_the_adds_own_pass_whatever_its_zero_point():
    # ResNet's identity shortcut: the block's input rescaled to the Add's type, the Add, its ReLU. The operand's table
    # takes the zero point in int16 (here -100 pushes entries past int8, which no int8 table could fold): one
    # LUT_VADD_LUT, the same values as LUT of the operand then VADD_LUT with the zero in its offset
    pre, zero = Rescale8(1 << 30, -1, 0, 0), -100
    chain = compact([AddTensor(None, zero, pre), Clamp8(-100, 127)])
    add = chain[0]
    assert len(chain) == 1 and add.folded and isinstance(add.pre, Lut16) and vector_passes(chain) == 1 + 1
    pixels, n = 3, 40000  # a tile of more elements than one instruction counts: two of them
    places = {id(add.post): 0x400, id(add.pre): 0x800}
    load, *fused = epilogue_specs(add, 0x10000, 0, pixels, n, 0x80000, places)
    assert load == LUT_LOAD(src=0x400) and [op.fields["count"] for op in fused] == [MAX_COUNT16, 3 * n - MAX_COUNT16]
    assert fused[1] == LUT_VADD_LUT(dst=0x10000 + MAX_COUNT16, src1=0x10000 + MAX_COUNT16, src2=0x80000 + MAX_COUNT16,
                                    table=0x800, count=3 * n - MAX_COUNT16)
    q, x = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128))
    rescaled = numerics.requantize(np.arange(-128, 128), 1 << 30, -1, 0).astype(np.int64)
    want = np.clip(np.clip(q + rescaled[x + 128] - zero, -128, 127), -100, 127)  # LUT, VADD, VSUBI, the clamp
    table = np.frombuffer(add.pre.table, "<i2").astype(np.int64)
    post = np.frombuffer(add.post.table, np.int8).astype(np.int64)
    np.testing.assert_array_equal(post[np.clip(q + table[x + 128], -128, 127) + 128], want)
    assert table.max() > 127  # no int8 table holds it
