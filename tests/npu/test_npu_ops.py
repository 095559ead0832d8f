"""The NPU's layers for the rest of the light models, each bit-exact with the reference evaluator.

Grouped and depthwise convolutions (block-diagonal layers), standalone per-channel affine (BatchNorm
not folded into a convolution), int8 LRN and global average pooling: each case quantizes a small
network with a profile of random inputs, compiles it for the NPU, and checks that the binary, run in
the simulator's checked mode, gives the reference evaluator's bytes on the quantized graph the binary
was compiled from (`assert_bit_exact`). Structure is checked too: the op runs quantized on the NPU,
in the layers intended.
"""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from glowsdk.backends.npu.gemm import GemmLayer
from glowsdk.backends.npu.grouped import block_diagonal, groups_per_layer
from glowsdk.backends.npu.maxpool import SeparableMaxPoolLayer
from glowsdk.backends.npu.step_cost import ConvShape
from glowsdk.backends.npu.vector import PoolLayer
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import nn
from glowsdk.graph.types import ElemKind, Type
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS

from npu_nets import NetBuilder
from test_npu_backend import assert_bit_exact


def _kinds(npu) -> list[str]:
    return [n.kind for n in npu.compiled.function.nodes]


def _grouped_net(c: int, oc: int, groups: int, k: int, stride: int, hw: int = 12):
    b = NetBuilder((1, c, hw, hw))
    first = b.conv("x", c, c, 1, 0)
    grouped = b.node("Conv", [first, b.weight((oc, c // groups, k, k)), b.weight((oc,))], group=groups,
                     pads=[k // 2] * 4, strides=[stride] * 2)
    return b.network(b.conv(b.node("Relu", [grouped]), oc, 8, 1, 0, relu=False))


@pytest.mark.parametrize("c,oc,groups,k,stride,config", [
    (48, 48, 48, 3, 1, "default"),   # depthwise: one layer on the vector engine (depthwise.py)
    (40, 40, 40, 3, 2, "edge"),      # depthwise, stride 2, tiled on the edge preset
    (24, 36, 3, 1, 1, "default"),    # a grouped 1x1 (ShuffleNet's kind), more outputs than inputs
    (16, 32, 2, 5, 1, "edge"),       # AlexNet's two groups, 5x5
])
def test_grouped_conv_bit_exact(c, oc, groups, k, stride, config):
    npu = assert_bit_exact(_grouped_net(c, oc, groups, k, stride), config=config)
    grouped = [n for n in npu.compiled.function.nodes if n.kind == "Conv" and n.group > 1]
    assert len(grouped) == 1 and grouped[0].type.elem.is_quantized
    shapes = [layer.body.shape for layer in npu.compiled.layers if layer.name.startswith(grouped[0].name)]
    m = shapes[0].out_channels // (oc // groups)
    assert len(shapes) == -(-groups // m) and sum(s.out_channels for s in shapes) == oc
    assert all(s.channels * oc == s.out_channels * c for s in shapes)  # whole groups in every layer


@pytest.mark.parametrize("c,groups,hw,config", [(136, 4, 14, "default"), (96, 2, 10, "edge"), (128, 4, 9, "edge")])
def test_wide_groups_one_layer_with_no_step_off_the_diagonal(c, groups, hw, config):
    """A grouped 1x1 with a residual Add (a ShuffleNet unit's second one): one layer whose output-channel tiles
    follow the groups, each reading only its own groups' input channels (no weight block off the diagonal)."""
    b = NetBuilder((1, c, hw, hw))
    first = b.conv("x", c, c, 1, 0)
    grouped = b.node("Conv", [first, b.weight((c, c // groups, 1, 1)), b.weight((c,))], group=groups)
    npu = assert_bit_exact(b.network(b.node("Relu", [b.node("Add", [grouped, first])])), config=config)
    layers = [layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and layer.body.groups > 1]
    assert len(layers) == 1 and layers[0].shape.out_channels == c and layers[0].epilogue
    layer, per_group = layers[0], c // groups
    assert all(n0 // per_group <= (c0 + layer.tiling.c - 1) // per_group and
               c0 // per_group <= (n0 + layer.tiling.n - 1) // per_group for n0, c0 in layer.weights)
    assert layer.tiling.n % per_group == 0 or per_group % layer.tiling.n == 0


def test_a_row_tile_loads_its_input_once_for_all_its_output_channel_tiles():
    """Every input channel in one step and several output-channel tiles (a wide 1x1 on the edge preset's small
    accumulator): each row tile loads its input rows once, each output-channel tile only its weights."""
    b = NetBuilder((1, 64, 14, 14))
    npu = assert_bit_exact(b.network(b.conv(b.conv("x", 64, 64, 1, 0), 64, 512, 1, 0)), config="edge")
    layer = next(layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and
                 layer.body.shape.out_channels == 512)
    s, t = layer.shape, layer.tiling
    assert t.c == s.channels and t.n < s.out_channels
    _, tiles, _ = layer.tiles(lambda tensor: 0, 0)
    loads = [op for tile in tiles for step in tile.steps for op in step.shared + step.loads if op.mnemonic == "LOAD"]
    row_tiles, steps = -(-s.out_height // t.rows), sum(len(tile.steps) for tile in tiles)
    chunks = max(1, len(tiles[0].steps[0].parts))  # a streamed first step loads its input rows in chunks
    # (the layer before loads the first weight block when it prefetches)
    assert len(loads) == row_tiles + chunks - 1 + steps - (layer.prefetched is not None)


def test_a_row_tile_input_waits_for_the_row_tile_two_back_only():
    """Many row tiles of several output-channel tiles each: a row tile's input (Step.shared) waits for the last
    step of the row tile two back to release its buffer (Step.releases), so its load overlaps the row tile
    before; checked simulation sees no race on the alternating buffers."""
    b = NetBuilder((1, 64, 28, 28))
    npu = assert_bit_exact(b.network(b.conv(b.conv("x", 64, 64, 1, 0), 64, 256, 1, 0)), config="edge")
    layer = next(layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and
                 layer.body.shape.out_channels == 256)
    s, t = layer.shape, layer.tiling
    _, tiles, _ = layer.tiles(lambda tensor: 0, 0)
    row_tiles = -(-s.out_height // t.rows)
    assert t.c == s.channels and t.n < s.out_channels and row_tiles > 2
    steps = [step for tile in tiles for step in tile.steps]
    assert sum(bool(step.shared) for step in steps) == sum(step.releases for step in steps) == row_tiles
    assert all(not step.releases or later.shared for step, later in zip(steps, steps[1:]))


def test_a_residual_expansion_writes_whole_dram_bursts():
    """ResNet's 64 -> 256 expansion at 56 x 56 with its residual Add: output-channel tiles of 64 write (and read the
    residual in) 64-byte runs, whose many short transfers each drain the DRAM window at their end (the estimate
    counts it, tiling.estimate); the tiler takes tiles of at least a burst's 128 channels, bit-exact in checked
    simulation."""
    b = NetBuilder((1, 256, 56, 56))
    x = b.node("Relu", ["x"])
    expanded = b.conv(b.conv(x, 256, 64, 1, 0), 64, 256, 1, 0, relu=False)
    npu = assert_bit_exact(b.network(b.node("Relu", [b.node("Add", [expanded, x])])), config="default")
    layer = next(layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and
                 layer.body.shape.out_channels == 256)
    assert layer.epilogue and layer.tiling.n >= PRESETS["default"].dma_burst_bytes


def _weight_and_row_loads(layer) -> list[tuple[bool, bool]]:
    """Per step of a one-weight-block layer: whether it loads the block, whether it loads input rows."""
    _, tiles, _ = layer.tiles(lambda tensor: 0, 0)
    block = layer.weights[(0, 0)]
    return [(any(op.mnemonic == "LOAD" and op.fields["dram"] == block for op in step.loads),
             any(op.mnemonic == "LOAD" and op.fields["dram"] != block for op in step.loads))
            for tile in tiles for step in tile.steps]


def test_a_layer_of_one_weight_block_loads_it_once():
    """One output-channel tile and every input channel in one step (a narrow 1x1 on a tall image): every step reads
    the one weight block where the first step loaded it."""
    b = NetBuilder((1, 32, 56, 56))
    npu = assert_bit_exact(b.network(b.conv("x", 32, 16, 1, 0)), config="edge")
    [layer] = [layer.body for layer in npu.compiled.layers if layer.kind == "Conv"]
    s, t = layer.shape, layer.tiling
    assert t.c == s.channels and t.n == s.out_channels and -(-s.out_height // t.rows) > 2
    assert [weight for weight, _ in _weight_and_row_loads(layer)] == [True] + [False] * (len(layer.row_tiles()) - 1)


def test_a_step_whose_rows_the_layer_before_kept_loads_the_weight_block_again():
    """The same layer after a 1x1 that keeps its result in the scratchpad for it (kept_inputs.py): its first step
    reads the block the layer before prefetched, and each later step, which loads no rows, loads the block again:
    that load is the one that waits for the step two back to free its slot, the order the layer's own prefetch for
    the layer after it relies on (prefetch.py)."""
    b = NetBuilder((1, 32, 56, 56))
    npu = assert_bit_exact(b.network(b.conv(b.conv("x", 32, 32, 1, 0), 32, 16, 1, 0)), config="edge")
    layer = next(layer.body for layer in npu.compiled.layers if layer.kind == "Conv" and
                 layer.body.shape.out_channels == 16)
    assert layer.kept_input is not None and layer.prefetched is not None
    loads = _weight_and_row_loads(layer)
    kept = layer.kept_input[1]
    assert loads[0] == (False, False)
    assert kept > 2 and all(weight and not rows for weight, rows in loads[1:kept])


def test_grouped_conv_per_channel_bit_exact():
    assert_bit_exact(_grouped_net(24, 24, 24, 3, 1), config="default", per_channel=True)


def test_block_diagonal_places_each_group_filter():
    filters = np.arange(4 * 2 * 1 * 1).reshape(4, 2, 1, 1)
    dense = block_diagonal(filters, 2)[:, :, 0, 0]
    np.testing.assert_array_equal(dense, [[0, 1, 0, 0], [2, 3, 0, 0], [0, 0, 4, 5], [0, 0, 6, 7]])


def test_groups_per_layer_near_the_array_width_for_depthwise_and_keeps_wide_groups_apart():
    config = PRESETS["default"]
    depthwise = ConvShape(1, 28, 28, 1, 28, 28, 3, 3, pads=(1, 1, 1, 1))
    m = groups_per_layer(depthwise, 240, config)
    assert config.array_cols // 2 <= m <= config.array_cols  # K = 9m fills whole folds of the array
    wide = ConvShape(48, 27, 27, 128, 27, 27, 5, 5, pads=(2, 2, 2, 2))
    assert groups_per_layer(wide, 2, config) == 1


@pytest.mark.parametrize("hw,config", [(9, "edge"), (13, "default")])
def test_global_average_pool_bit_exact(hw, config):
    """Kept unlowered, quantized to the AveragePool of the whole image (POOL avg on the NPU)."""
    b = NetBuilder((1, 8, hw, hw))
    pooled = b.node("GlobalAveragePool", [b.conv("x", 8, 40)])
    npu = assert_bit_exact(b.network(b.conv(pooled, 40, 10, 1, 0, relu=False)), config=config)
    pools = [n for n in npu.compiled.function.nodes if n.kind == "AveragePool"]
    assert len(pools) == 1 and pools[0].kernel == (hw, hw) and pools[0].type.elem.is_quantized
    assert "ReduceSum" not in _kinds(npu)


@pytest.mark.parametrize("c,hw,k,stride,pad,ceil,config", [
    (8, 13, 3, 2, 0, 0, "edge"),       # squeezenet's pools: two row phases
    (8, 12, 3, 2, 1, 0, "edge"),       # a padded stride-2 window (resnet's stem)
    (16, 14, 3, 1, 1, 0, "default"),   # GoogLeNet's pool branch: one phase, 5 steps a pixel for POOL's 9
    (8, 11, 3, 2, 0, 1, "edge"),       # ceil mode: the last window runs past the image
    (8, 10, 5, 3, 2, 0, "edge"),       # three phases
    (300, 40, 3, 1, 1, 0, "edge"),     # channel blocks and row tiles
])
def test_separable_max_pool_bit_exact(c, hw, k, stride, pad, ceil, config):
    """A MaxPool as VMAXes over row phases and one 1 x k POOL (maxpool.py), where that is fewer vector steps.
    It reads the network's input: behind a convolution it may run beside it (overlap.py, tested there) or
    inside its tiles (GemmLayer.window, test_npu_fusion.py)."""
    b = NetBuilder((1, c, hw, hw))
    pooled = b.node("MaxPool", ["x"], kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4, ceil_mode=ceil)
    npu = assert_bit_exact(b.network(pooled), config=config)
    assert [type(layer.body) for layer in npu.compiled.layers if layer.kind == "MaxPool"] == [SeparableMaxPoolLayer]


def test_max_pool_keeps_the_window_where_separable_is_no_cheaper():
    """2 x 2 stride 2: one VMAX over the rows and a 1 x 2 POOL take as many steps as POOL's 2 x 2 window."""
    b = NetBuilder((1, 8, 12, 12))
    npu = assert_bit_exact(b.network(b.node("MaxPool", [b.conv("x", 8, 8)], kernel_shape=[2, 2], strides=[2, 2])))
    assert [type(layer.body) for layer in npu.compiled.layers if layer.kind == "MaxPool"] == [PoolLayer]


@pytest.mark.parametrize("kind,hw,config,fused", [
    ("GlobalAveragePool", 13, "default", True),   # squeezenet's classifier: conv, ReLU, the mean of 13 x 13
    ("MaxPool", 7, "edge", True),                 # a max pool whose window is the whole image
    ("GlobalAveragePool", 96, "edge", False),     # no tile holds the whole image: a pool layer of its own
])
def test_global_pool_in_the_convolution_that_makes_its_input(kind, hw, config, fused):
    """A global pool that is a convolution's only reader runs in its tiles (each tile every row of its channels:
    REDUCE, then VDIV by the pixel count or VADDI back to int8), where a tiling fits."""
    b = NetBuilder((1, 8, hw, hw))
    window = dict(kernel_shape=[hw, hw]) if kind == "MaxPool" else {}
    pooled = b.node(kind, [b.conv(b.conv("x", 8, 8), 8, 40, 1, 0)], **window)
    npu = assert_bit_exact(b.network(b.conv(pooled, 40, 10, 1, 0, relu=False)), config=config)
    convs = [layer.body for layer in npu.compiled.layers if layer.kind == "Conv"]
    assert [body.pool for body in convs] == [None, ("max" if kind == "MaxPool" else "avg") if fused else None, None]
    assert convs[1].prefetched is not None  # the convolution before loads its weights, pooled or not (prefetch.py)
    assert any(layer.kind in ("AveragePool", "MaxPool") for layer in npu.compiled.layers) is not fused


@pytest.mark.parametrize("kind,batch,hw,config", [
    ("GlobalAveragePool", 1, 14, "default"),  # several row tiles: a running sum, divided on the last
    ("MaxPool", 2, 9, "edge"),                # the whole image's window; the running row restarts per image
    ("GlobalAveragePool", 3, 5, "edge"),
])
def test_squeeze_and_excitation_pool_in_the_depthwise_convolution(kind, batch, hw, config):
    """A global pool beside the channel gate, both reading a depthwise convolution's result, runs in the
    convolution's tiles (REDUCE per tile into a running row, VDIV or VADDI on an image's last row tile): no pool
    layer, the image still written for the gate, which multiplies and requantizes in one pass (in its own layer, or
    for one image in the 1x1 convolution that reads it, as that loads its input)."""
    c = 24
    b = NetBuilder((batch, 8, hw, hw))
    image = b.node("Relu", [b.node("Conv", [b.conv("x", 8, c, 1, 0), b.weight((c, 1, 3, 3)), b.weight((c,))],
                                   pads=[1] * 4, group=c)])
    window = dict(kernel_shape=[hw, hw]) if kind == "MaxPool" else {}
    gate = b.node("Sigmoid", [b.conv(b.conv(b.node(kind, [image], **window), c, 8, 1, 0), 8, c, 1, 0, relu=False)])
    npu = assert_bit_exact(b.network(b.conv(b.node("Mul", [image, gate]), c, 8, 1, 0, relu=False)), config=config)
    depthwise = [layer.body for layer in npu.compiled.layers if type(layer.body).__name__ == "DepthwiseLayer"]
    assert [body.pool for body in depthwise] == ["max" if kind == "MaxPool" else "avg"]
    assert not any(layer.kind in ("AveragePool", "MaxPool") for layer in npu.compiled.layers)
    gated = [layer for layer in npu.compiled.layers if isinstance(layer.body, GemmLayer) and layer.body.gate]
    assert [layer.kind for layer in npu.compiled.layers].count("Mul") == (batch > 1) and len(gated) == (batch == 1)
    # the gate multiplies and requantizes in one pass (REQUANT_MUL), the products never in the accumulator
    mnemonics = {i.mnemonic for i in npu.compiled.binary.instructions}
    assert "REQUANT_MUL" in mnemonics and "VMUL" not in mnemonics


def _batchnorm_net(c: int, hw: int, relu: bool = True, seed: int = 0):
    """A BatchNorm no convolution precedes (DenseNet's pre-activation after a Concat), then a 1x1 Conv."""
    b = NetBuilder((1, c, hw, hw), seed=seed)
    joined = b.node("Concat", [b.conv("x", c, c // 2), b.node("MaxPool", ["x"], kernel_shape=[1, 1])], axis=1)
    width = 2 * c - c // 2
    stats = [b.weight((width,)) for _ in range(3)] + ["var"]
    b.weights.append(numpy_helper.from_array(b.rng.uniform(0.1, 2.0, width).astype(np.float32), "var"))
    normed = b.node("BatchNormalization", [joined, *stats])
    out = b.node("Relu", [normed]) if relu else normed
    return b.network(b.conv(out, 2 * c - c // 2, 8, 1, 0, relu=False))


@pytest.mark.parametrize("c,hw,relu,config", [(8, 10, True, "edge"), (64, 20, False, "default"),
                                               (256, 14, True, "edge")])
def test_standalone_batchnorm_bit_exact(c, hw, relu, config):
    npu = assert_bit_exact(_batchnorm_net(c, hw, relu), config=config)
    muls = [n for n in npu.compiled.function.nodes if n.kind == "Mul"]
    assert len(muls) == 1 and muls[0].type.elem.is_quantized  # x * a[c] + b[c]: one int32 product and bias
    assert [layer.kind for layer in npu.compiled.layers].count("Mul") == 1


def _lrn_net(c: int, hw: int, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0):
    b = NetBuilder((1, c, hw, hw))
    normed = b.node("LRN", [b.conv("x", c, c, 3, 1)], size=size, alpha=alpha, beta=beta, bias=bias)
    return b.network(b.conv(normed, c, 8, 1, 0, relu=False))


@pytest.mark.parametrize("c,hw,size,alpha,beta,bias,config", [
    (16, 9, 5, 1e-4, 0.75, 1.0, "edge"),        # AlexNet's and GoogLeNet's parameters
    (96, 27, 5, 0.02, 0.75, 2.0, "edge"),       # a strong normaliser, many chunks
    (24, 12, 4, 0.05, 0.5, 1.0, "default"),     # an even window (one more channel after than before)
    (8, 6, 1, 0.1, 1.0, 1.5, "default"),        # a window of one channel
    (16, 7, 7, 1e-3, 0.75, 1.0, "edge"),        # doubled to four channels, then three added one at a time
])
def test_lrn_bit_exact(c, hw, size, alpha, beta, bias, config):
    npu = assert_bit_exact(_lrn_net(c, hw, size, alpha, beta, bias), config=config)
    lrns = [n for n in npu.compiled.function.nodes if n.kind == "LRN"]
    assert len(lrns) == 1 and lrns[0].type.elem.is_quantized and "Pow" not in _kinds(npu)


def _int8_lrn_error(size: int, alpha: float, beta: float, bias: float, amplitude: float, offset: int) -> np.ndarray:
    """|int8 LRN - onnxruntime's float LRN| on the same (dequantized) random input, in output steps."""
    shape = (2, 32, 5, 5)
    scale = np.float32(amplitude / 127.5)
    q = np.random.default_rng(7).integers(-128, 128, shape).astype(np.int8)
    x = ((q.astype(np.float32) - offset) * scale).astype(np.float32)
    module = Module()
    fn = module.create_function("main")
    placeholder = module.create_placeholder("x", Type(ElemKind.QINT8, shape, float(scale), offset)).result()
    fn.save(fn.add(nn.LRN, placeholder, size=size, alpha=alpha, beta=beta, bias=bias), "y")
    ours = (evaluate(fn, {"x": q})["y"].astype(np.float32) - offset) * scale
    node = helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)
    graph = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.abs(ours - session.run(None, {"x": x})[0]) / scale


@pytest.mark.parametrize("amplitude,offset", [(30.0, -20), (300.0, 0), (1000.0, -128), (3000.0, 37)])
def test_int8_lrn_accuracy_against_onnxruntime(amplitude, offset):
    """AlexNet's and GoogLeNet's LRN (size 5, alpha 1e-4, beta 0.75, bias 1) at input ranges from a weak to a
    strong normaliser (the output down to a few percent of the input): within 2 output steps, 0.3 on average (the
    rounding of the result alone is 0.25 on average). The bucketed table costs the excess where the
    normaliser changes fastest; stronger normalisers (alpha 0.5) reach about 4 steps."""
    error = _int8_lrn_error(5, 1e-4, 0.75, 1.0, amplitude, offset)
    assert error.max() <= 2.0 and error.mean() <= 0.3
