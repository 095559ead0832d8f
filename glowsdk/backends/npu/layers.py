"""From the scheduled, quantized graph to NPU layers placed in DRAM.

Works on the graph rather than the low-level IR because the NPU's units are graph patterns (Conv or
MatMul with its bias and Rescale is one layer: the accumulator never leaves the chip) and its
tensors have their own layouts (NHWC images, pre-tiled weights) that the host allocator's flat
buffers do not describe. Nodes are taken in the scheduled order; each becomes one layer, or none
when it only renames bytes (a Reshape of a row-major tensor, the Rescale fused into a layer).
The border stays on the host: an input's Quantize is the binding quantizing the float input, an
output's Dequantize the binding dequantizing it (sim/binding.py), with the scale and offset the
tensor table records.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from isa.config import ArchConfig
from isa.program import LUT_BYTES

from ...errors import UnsupportedError
from ...graph.function import Function
from ...graph.node import Constant, Node, NodeValue, Placeholder
from ...graph.nodes import quant
from ...graph.nodes.lrn_int8 import lrn_table
from ...graph.types import ElemKind
from .affine import AffineLayer, check_bias
from .bmm import MAX_COL_STRIDE, bmm_layer
from .broadcast import RowBroadcastLayer
from .epilogue import AddTensor, Clamp8, EpilogueOp, Lut8, Rescale8, monotone
from .gemm import ChannelGate, GemmLayer, Requant, gateable, whole_image_fits, window_plan
from .gather import gather_layer
from .gate import GateLayer
from .globalpool import GlobalPoolLayer
from .depthwise import DepthwiseLayer
from .grouped import grouped_layers
from .layernorm import layernorm_layers
from .lrn import LrnLayer
from .lut import lut_layer
from .maxpool import separable
from .shuffle import channel_shuffle
from .tensors import DramPlanner, DramTensor, dense_strides, nhwc_strides
from .step_cost import ConvShape
from .support import product_form, quantized_form_ok, whole_image_window
from .product import ProductLayer
from .softmax import SoftmaxLayer, softmax_table, trailing_length
from .tile_loads import Image
from .vector import ElementwiseLayer, PoolLayer, check_requant
from .window import window_pooled


@dataclass
class CopyLayer:
    """Bytes moved from one view to another of the same logical shape."""

    source: DramTensor
    result: DramTensor


@dataclass(frozen=True)
class _Gate:
    """A channel gate a convolution takes: the image it gates and how."""

    source: DramTensor
    gate: ChannelGate


@dataclass
class Layer:
    name: str
    kind: str
    body: Any


def _zero(value: NodeValue) -> int:
    return int(value.type.offsets.reshape(-1)[0])


def _scale(value: NodeValue) -> float:
    return float(value.type.scales.reshape(-1)[0])


def _rescale8(node: Node) -> Rescale8:
    """An int8 -> int8 Rescale node as the on-chip step."""
    r = requant_params(node.input, node.result(), 1, f"'{node.name}'")
    return Rescale8(int(r.multipliers[0]), int(r.shifts[0]), _zero(node.input), r.zero)


def _residual_rescale(node: Node) -> bool:
    """An int8 Rescale whose only use is an Add: the layer whose epilogue makes that Add rescales the operand
    on chip (AddTensor.pre), so it waits for that layer rather than being one of its own at its place in the
    schedule (which may come first)."""
    users = list(node.users)
    return node.kind == "Rescale" and node.input.type.elem is ElemKind.QINT8 and len(users) == 1 and \
        users[0].kind == "Add"


def requant_params(source: NodeValue, result: NodeValue, channels: int, what: str) -> Requant:
    """The fixed-point (M, shift) per channel of a Rescale from `source`'s scale(s) to `result`'s."""
    scales = np.broadcast_to(source.type.scales.reshape(-1), (channels,))
    pairs = [quant.fixed_point_multiplier(float(s), _scale(result)) for s in scales]
    for m, k in pairs:
        check_requant(m, k, what)
    return Requant(np.array([m for m, _ in pairs], np.int64), np.array([k for _, k in pairs], np.int64),
                   _zero(result))


def _read_in_place(transpose: Node, view: DramTensor) -> bool:
    """Whether every user of `transpose` is a product of two activations that can load `view` as it is."""
    users = list(transpose.users)
    return bool(users) and view.strides[-1] <= MAX_COL_STRIDE and all(
        u.kind == "MatMul" and not isinstance(u.rhs.node, Constant) and quantized_form_ok(u) for u in users)


@dataclass
class LayerBuilder:
    """Walks the graph, places tensors and constants, and lists the layers."""

    function: Function
    config: ArchConfig
    planner: DramPlanner = field(init=False)
    constants: bytearray = field(default_factory=bytearray)
    values: dict[NodeValue, DramTensor] = field(default_factory=dict)
    layers: list[Layer] = field(default_factory=list)
    inputs: dict[str, DramTensor] = field(default_factory=dict)
    outputs: dict[str, DramTensor] = field(default_factory=dict)
    fused: set[int] = field(default_factory=set)

    def add_constant(self, data: bytes) -> int:
        offset = len(self.constants)
        self.constants += data + bytes(-len(data) % 64)
        return offset

    def build(self) -> list[Layer]:
        for node in self.function.nodes:
            if isinstance(node, (Constant, Placeholder)) or node.kind == "Save" or id(node) in self.fused:
                continue
            if _residual_rescale(node):
                self._deferred[node.result()] = node
                continue
            build = LAYERS.get(node.kind)
            if build is None:
                raise UnsupportedError(f"the NPU has no layer for {node.kind} node '{node.name}'")
            build(self, node)
        return self.layers

    # -- tensors -----------------------------------------------------------------------------------
    def tensor(self, value: NodeValue) -> DramTensor:
        if value in self._deferred:  # an operand Rescale no epilogue took: a layer of its own after all
            self._rescale(self._deferred.pop(value))
        if value in self._gates:  # a channel gate no convolution took
            self._gate_layer(self._gates.pop(value))
        if value not in self.values and isinstance(value.node, Constant):
            data = np.ascontiguousarray(value.node.value).astype(value.type.dtype).tobytes()
            offset = self.add_constant(data)
            itemsize = value.type.dtype.itemsize
            self.values[value] = DramTensor(value.name, value.type.shape, dense_strides(value.type.shape, itemsize),
                                            "constants", offset, _scale(value), _zero(value), itemsize)
        return self.values[value]

    def _new(self, value: NodeValue, nhwc: bool = False, region: str = "activations", name: str = "") -> DramTensor:
        return self.planner.allocate(name or value.name, value.type.shape, region, nhwc=nhwc, scale=_scale(value),
                                     zero=_zero(value), itemsize=value.type.dtype.itemsize)

    def _copy(self, name: str, source: DramTensor, result: DramTensor) -> None:
        self.layers.append(Layer(name, "Copy", CopyLayer(source, result)))

    def laid_out(self, value: NodeValue, nhwc: bool) -> DramTensor:
        """`value`'s tensor as an NHWC image or row-major, copied into that layout when it is not."""
        tensor = self.tensor(value)
        if (tensor.is_nhwc() if nhwc else tensor.is_dense()):
            return tensor
        key = (value, nhwc)
        if key not in self._relayouts:
            copy = self._new(value, nhwc, name=f"{value.name}/{'nhwc' if nhwc else 'dense'}")
            self._copy(copy.name, tensor, copy)
            self._relayouts[key] = copy
        return self._relayouts[key]

    def __post_init__(self) -> None:
        self.planner = DramPlanner(self.config.dma_burst_bytes)
        self._relayouts: dict[tuple[NodeValue, bool], DramTensor] = {}
        self._deferred: dict[NodeValue, Node] = {}
        """int8 Rescales of an Add's operand, left for the epilogue that adds them (`_residual_rescale`)"""
        self._joined: dict[int, DramTensor] = {}
        """a channel Concat's result, placed by the first of its parts' layers (`_image_out`)"""
        self._gates: dict[NodeValue, Node] = {}
        """channel gates (their Mul) left for the 1 x 1 convolution that reads them to apply (`_gated_conv`)"""

    # -- the border ----------------------------------------------------------------------------------
    def _quantize(self, node: Node) -> None:
        """An input, as the host binding writes it: an image channels-innermost (the layout the layers read)."""
        name = node.input.node.name
        tensor = self._new(node.result(), nhwc=len(node.type.shape) == 4, region="inputs", name=name)
        self.inputs[name] = tensor
        self.values[node.result()] = tensor

    def _dequantize(self, node: Node) -> None:
        source = self.tensor(node.input)
        nhwc = len(source.shape) == 4 and source.is_nhwc()
        for save in node.users:
            name = save.inputs[1].node.name
            result = self._new(node.input, nhwc=nhwc, region="outputs", name=name)
            self._copy(name, source, result)
            self.outputs[name] = result

    # -- matrix layers --------------------------------------------------------------------------------
    def _conv(self, node: Node) -> None:
        if node.group > 1:
            return self._grouped_conv(node)
        rescale = next(iter(node.users))
        self.fused.add(id(rescale))
        gate = self._take_gate(node.input)
        x = self.laid_out(node.input, nhwc=True) if gate is None else gate.source
        epilogue, end = self._epilogue(rescale.result())
        order, end = self._shuffled(end, epilogue)
        oc = node.type.shape[1]
        shape = _conv_shape(node)
        pool = self._whole_image_pool(end) if order is None else None
        if pool is not None and not whole_image_fits(shape, self.config, bool(rescale.input.type.per_channel),
                                                     epilogue, gate is not None):
            pool = None
        fits = pool is None and order is None and gate is None and self._window_fits(node, epilogue)
        window = self._window_pool(end) if fits else None
        joined = self._pooled_concat(end) if fits and window is None else None
        if joined is None and any(id(user) in self.fused for user in end.node.users if user.kind == "Concat"):
            raise AssertionError(f"'{node.name}' writes part of a pooled Concat but cannot pool it")
        if pool is not None:  # the convolution's tiles pool its result: the image never reaches DRAM
            self.fused.add(id(pool))
            end = pool.result()
        filters = np.asarray(node.filter.node.value)
        bias = np.zeros(oc, np.int64) if node.bias is None else np.asarray(node.bias.node.value, np.int64)
        if window is not None:  # the tiles pool the result as they make it (gemm.GemmLayer._window_pool)
            self.fused.add(id(window))
            self.values[window.result()] = out = self._image_out(window.result())
            self._gemm(node, shape, Image.of(x), Image.of(out), filters, bias, rescale, tuple(epilogue), window=True,
                       window_pad=window.pads[0])
            return
        if joined is not None:  # each part of the Concat pools its own channels (the pool is per channel)
            concat, window = joined
            self.fused.update((id(concat), id(window)))
            if window.result() not in self.values:
                self.values[window.result()] = self._image_out(window.result())
            start = sum(v.type.shape[1] for v in concat.inputs[:list(concat.inputs).index(end)])
            out = self.values[window.result()].sliced(1, start, oc, name=end.name)
            self._gemm(node, shape, Image.of(x), Image.of(out), filters, bias, rescale, tuple(epilogue), window=True,
                       window_pad=window.pads[0])
            return
        out = self._new(end, nhwc=True) if pool is not None else self._image_out(end)
        self.values[end] = out
        self._gemm(node, shape, Image.of(x), Image.of(out), filters, bias, rescale, tuple(epilogue), order,
                   None if pool is None else "avg" if pool.kind == "AveragePool" else "max",
                   None if gate is None else gate.gate)

    def _window_fits(self, node: Node, epilogue: Sequence[EpilogueOp]) -> bool:
        """Whether the convolution `node` (its epilogue steps `monotone`) has tiles that can max pool its result
        (`gemm.window_plan`)."""
        rescale = next(iter(node.users))
        return node.input.type.shape[0] == 1 and all(monotone(op) for op in epilogue) and window_plan(
            _conv_shape(node), self.config, bool(rescale.input.type.per_channel), epilogue) is not None

    def _pooled_concat(self, value: NodeValue) -> tuple[Node, Node] | None:
        """The channel Concat that is `value`'s only reader and the 3x3 stride-2 max pool that is the Concat's
        (`_window_pool`), where every part of the Concat is a convolution's result its tiles can pool: a max pool
        is per channel, so each part pools its slice and the Concat's full image never reaches DRAM (SqueezeNet's
        fire modules)."""
        users = list(value.node.users)
        concat = users[0] if len(users) == 1 and users[0].kind == "Concat" else None
        if concat is None or len(concat.type.shape) != 4 or concat.axis % 4 != 1 or \
                len(set(concat.inputs)) != len(concat.inputs):
            return None
        pool = self._window_pool(concat.result())
        return (concat, pool) if pool is not None and all(self._pooled_part(v) for v in concat.inputs) else None

    def _pooled_part(self, value: NodeValue) -> bool:
        """Whether `value` is a convolution's result through its Rescale and `monotone` steps only, each the only
        reader of the one before, and the convolution can pool it (`_window_fits`; nothing here marks a node
        fused)."""
        node = value.node
        while not (node.kind == "Rescale" and node.input.node.kind == "Conv"):  # back to the convolution's Rescale
            computed = [v for v in node.inputs if v is not None and not isinstance(v.node, Constant)]
            if node.kind not in ("Max", "Min", "Rescale") or len(computed) != 1:
                return False
            node = computed[0].node
        conv, epilogue, step = node.input.node, [], node.result()
        if conv.group != 1 or len(conv.users) != 1 or conv.input in self._gates:
            return False
        while step != value:
            if len(step.node.users) != 1:
                return False
            user = next(iter(step.node.users))
            op = self._epilogue_step(user, step)
            if op is None or not monotone(op):
                return False
            epilogue.append(op)
            step = user.result()
        return self._window_fits(conv, epilogue)

    def _window_pool(self, value: NodeValue) -> Node | None:
        """The 3x3 stride-2 max pool (keeping the type) that is `value`'s only reader, unpadded or padded by one row
        on top and one column on the left (its padding below and on the right, if any, read by no window)."""
        if len(value.node.users) != 1:
            return None
        user = next(iter(value.node.users))
        if user.kind != "MaxPool" or tuple(user.kernel) != (3, 3) or tuple(user.strides) != (2, 2) \
                or any(d != 1 for d in user.dilations) or user.pads[0] != user.pads[1] or user.pads[0] > 1:
            return None
        h, w = value.type.shape[2:]
        pad = user.pads[0]
        if tuple(user.type.shape[2:]) != (window_pooled(h, pad), window_pooled(w, pad)):
            return None
        return user if (_scale(user.result()), _zero(user.result())) == (_scale(value), _zero(value)) else None

    def _whole_image_pool(self, value: NodeValue) -> Node | None:
        """The global pool (a window over the whole image, keeping the type) that is `value`'s only reader."""
        return self._global_pool_reader(value) if len(value.node.users) == 1 else None

    def _global_pool_reader(self, value: NodeValue) -> Node | None:
        """A global pool (a window over the whole image, keeping the type) among `value`'s readers: a
        squeeze-and-excitation block's, beside the channel gate."""
        if len(value.type.shape) != 4:
            return None
        return next((user for user in value.node.users if user.kind in ("AveragePool", "MaxPool")
                     and whole_image_window(user)
                     and (_scale(user.result()), _zero(user.result())) == (_scale(value), _zero(value))), None)

    def _epilogue(self, value: NodeValue) -> tuple[list[EpilogueOp], NodeValue]:
        """The element-wise chain after a convolution's int8 result that its tiles can apply on chip
        (each step the only user of the one before), and the value the chain ends at."""
        ops: list[EpilogueOp] = []
        while len(value.node.users) == 1:
            user = next(iter(value.node.users))
            op = self._epilogue_step(user, value)
            if op is None:
                break
            ops.append(op)
            self.fused.add(id(user))
            value = user.result()
        return ops, value

    def _shuffled(self, end: NodeValue, epilogue: list[EpilogueOp]) -> tuple[np.ndarray | None, NodeValue]:
        """A channel shuffle of a layer's result taken into the layer (shuffle.py): the order the layer writes
        its output channels in, and the value it then computes (`end` itself when there is none). A residual
        operand in the epilogue keeps the layer's own order."""
        found = channel_shuffle(end)
        if found is None or any(isinstance(op, AddTensor) for op in epilogue):
            return None, end
        order, nodes = found
        self.fused.update(id(n) for n in nodes)
        return order, nodes[-1].result()

    def _epilogue_step(self, user: Node, value: NodeValue) -> EpilogueOp | None:
        if not quantized_form_ok(user):
            return None
        if user.kind == "Rescale":
            return _rescale8(user)
        if user.kind == "TableLookup" and isinstance(user.table.node, Constant):  # a HardSwish, SiLU, Sigmoid...
            return Lut8(np.asarray(user.table.node.value).astype(np.int8).tobytes())
        if user.kind in ("Max", "Min"):
            other = user.rhs if user.lhs == value else user.lhs
            bound = np.unique(np.asarray(other.node.value)) if isinstance(other.node, Constant) else ()
            if len(bound) != 1:
                return None
            return Clamp8(int(bound[0]), 127) if user.kind == "Max" else Clamp8(-128, int(bound[0]))
        if user.kind == "Add" and user.lhs.type.shape == user.rhs.type.shape:
            other = user.rhs if user.lhs == value else user.lhs
            pre = None
            if other not in self.values and other.node.kind == "Rescale" and len(other.node.users) == 1:
                pre, other = _rescale8(other.node), other.node.input
                if other not in self.values:
                    return None
            if other not in self.values or not self.values[other].is_nhwc():
                return None
            if pre is not None:
                self.fused.add(id(user.rhs.node if user.lhs == value else user.lhs.node))
            return AddTensor(Image.of(self.values[other]), _zero(user.result()), pre)
        return None

    def _matmul(self, node: Node) -> None:
        user = next(iter(node.users))
        if not isinstance(node.rhs.node, Constant):  # two activations (bmm.py)
            self.fused.add(id(user))
            requant = requant_params(user.input, user.result(), 1, f"'{user.name}'")
            self.layers.append(Layer(node.name, node.kind, bmm_layer(self, node, user, requant)))
            return
        bias = np.zeros(node.type.shape[-1], np.int64)
        if user.kind == "Add":
            other = user.rhs if user.lhs == node.result() else user.lhs
            bias = np.asarray(other.node.value, np.int64).reshape(-1)
            self.fused.add(id(user))
            user = next(iter(user.users))
        self.fused.add(id(user))
        x = self.laid_out(node.lhs, nhwc=False)
        out = self._new(user.result())
        self.values[user.result()] = out
        m, k = node.lhs.type.shape
        n = node.type.shape[1]
        filters = np.asarray(node.rhs.node.value).T.reshape(n, k, 1, 1)
        self._gemm(node, ConvShape(k, m, 1, n, m, 1), Image.of(x), Image.of(out), filters, bias, user)

    def _gemm(self, node: Node, shape: ConvShape, x: Image, out: Image, filters: np.ndarray, bias: np.ndarray,
              rescale: Node, epilogue: tuple[EpilogueOp, ...] = (), order: np.ndarray | None = None,
              pool: str | None = None, gate: ChannelGate | None = None, window: bool = False,
              window_pad: int = 0) -> None:
        """One convolution/matrix layer; `order` permutes its output channels (a channel shuffle), `pool` ("avg",
        "max") pools its result over the whole image, `gate` scales its input's channels as it is loaded, `window`
        max pools it 3x3 with stride 2 (padded by `window_pad` on top and on the left)."""
        requant = requant_params(rescale.input, rescale.result(), shape.out_channels, f"'{rescale.name}'")
        if order is not None:
            filters, bias, requant = filters[order], bias[order], requant.take(order)
        layer = GemmLayer.plan(shape, self.config, x, out, filters, bias, requant, _zero(node.inputs[0]),
                               self.add_constant, epilogue, pool=pool, gate=gate, window=window,
                               window_pad=window_pad)
        self.layers.append(Layer(node.name, node.kind, layer))

    def _grouped_conv(self, node: Node) -> None:
        """A grouped Conv -> Rescale: block-diagonal convolution layers (grouped.py), or a depthwise one on the
        vector engine (depthwise.py), with the element-wise chain after it (a ReLU6's Min, a residual Add) in
        the epilogue and a channel shuffle after that in its output order (block-diagonal: a shuffle moves
        channels between the groups)."""
        rescale = next(iter(node.users))
        self.fused.add(id(rescale))
        x = self.laid_out(node.input, nhwc=True)
        epilogue, end = self._epilogue(rescale.result())
        order, end = self._shuffled(end, epilogue)
        out = self._image_out(end)
        self.values[end] = out
        requant = requant_params(rescale.input, rescale.result(), node.type.shape[1], f"'{rescale.name}'")
        _, c, h, w = node.input.type.shape
        _, oc, oh, ow = node.type.shape
        if order is None and node.group == c == oc:
            shape = ConvShape(c, h, w, oc, oh, ow, *node.kernel, tuple(node.strides), tuple(node.dilations),
                              tuple(node.pads[:4]))
            bias = np.zeros(oc, np.int64) if node.bias is None else np.asarray(node.bias.node.value, np.int64)
            pool = self._global_pool_reader(end)
            layer = DepthwiseLayer.plan(shape, self.config, Image.of(x), Image.of(out),
                                        np.asarray(node.filter.node.value), bias, requant, _zero(node.input),
                                        self.add_constant, tuple(epilogue),
                                        None if pool is None else "avg" if pool.kind == "AveragePool" else "max")
            if layer is not None:
                if pool is not None:  # the tiles pool the result as they make it: the pool reads no DRAM
                    self.fused.add(id(pool))
                    self.values[pool.result()] = pooled = self._new(pool.result(), nhwc=True)
                    layer.pooled = Image.of(pooled)
                self.layers.append(Layer(node.name, node.kind, layer))
                return
        for name, layer in grouped_layers(node, x, out, requant, self.config, self.add_constant, tuple(epilogue),
                                          order):
            self.layers.append(Layer(name, node.kind, layer))

    def _mul(self, node: Node) -> None:
        """x * a[c] [+ b[c]] -> Rescale: a standalone BatchNorm as the per-channel affine layer (affine.py); x * s
        with s computed at run time: a channel gate (gate.py)."""
        if product_form(node):
            return self._product(node)
        if not any(isinstance(v.node, Constant) for v in node.inputs):
            return self._gate(node)
        x, a = (node.lhs, node.rhs) if isinstance(node.rhs.node, Constant) else (node.rhs, node.lhs)
        channels = node.type.shape[1]
        bias = np.zeros(channels, np.int64)
        user = next(iter(node.users))
        if user.kind == "Add":
            other = user.rhs if user.lhs == node.result() else user.lhs
            bias = np.broadcast_to(np.asarray(other.node.value, np.int64).reshape(-1), (channels,))
            self.fused.add(id(user))
            user = next(iter(user.users))
        self.fused.add(id(user))
        check_bias(bias, f"'{node.name}'")
        weights = np.broadcast_to(np.asarray(a.node.value).reshape(-1), (channels,)).astype(np.int8)
        rows = [DramTensor(f"{node.name}/{what}", (channels,), (size,), "constants", self.add_constant(data),
                           itemsize=size)
                for what, size, data in (("weights", 1, weights.tobytes()), ("bias", 4, bias.astype("<i4").tobytes()))]
        source = self._compact_nhwc(x)
        out = self._new(user.result(), nhwc=True)
        self.values[user.result()] = out
        requant = requant_params(user.input, user.result(), 1, f"'{user.name}'")
        self.layers.append(Layer(node.name, node.kind, AffineLayer(source, out, channels, *rows, _zero(x), requant)))

    def _product(self, node: Node) -> None:
        """a * b -> Rescale of two int8 tensors of one shape computed at run time (product.py)."""
        rescale = next(iter(node.users))
        self.fused.add(id(rescale))
        lhs, rhs = (self._constant_operand(v, node.type.shape, False) if isinstance(v.node, Constant)
                    else self.laid_out(v, nhwc=False) for v in (node.lhs, node.rhs))
        out = self._new(rescale.result())
        self.values[rescale.result()] = out
        requant = requant_params(rescale.input, rescale.result(), 1, f"'{rescale.name}'")
        self.layers.append(Layer(node.name, node.kind, ProductLayer(lhs, rhs, out, (_zero(node.lhs), _zero(node.rhs)),
                                                                    requant)))

    def _gate(self, node: Node) -> None:
        """x * s -> Rescale, s one int8 value per channel computed at run time: left for the 1 x 1 convolution that
        is the result's only reader to apply as it loads x (`_gated_conv`), else the channel-gate layer."""
        rescale = next(iter(node.users))
        self.fused.add(id(rescale))
        if self._gated_conv(rescale.result()):
            self._gates[rescale.result()] = node
            return
        self._gate_layer(node)

    @staticmethod
    def _gated_conv(value: NodeValue) -> bool:
        """Whether `value` (a channel gate's result) has one reader, a convolution whose input tiles can be gated
        as they are loaded (`gemm.gateable`): squeeze-and-excitation's projection."""
        users = list(value.node.users)
        if len(users) != 1 or users[0].kind != "Conv" or users[0].input != value or users[0].group != 1:
            return False
        conv = users[0]
        n, c, h, w = value.type.shape
        kh, kw = conv.kernel
        shape = ConvShape(c, h, w, conv.type.shape[1], *conv.type.shape[2:], kh, kw, tuple(conv.strides),
                          tuple(conv.dilations), tuple(conv.pads[:4]))
        return gateable(shape, n)

    def _take_gate(self, value: NodeValue) -> _Gate | None:
        """The channel gate left for the convolution reading `value` (`_gate`), as that layer applies it."""
        node = self._gates.pop(value, None)
        if node is None:
            return None
        x, s = (node.lhs, node.rhs) if node.lhs.type.shape == node.type.shape else (node.rhs, node.lhs)
        rescale = next(iter(node.users))
        requant = requant_params(rescale.input, rescale.result(), 1, f"'{rescale.name}'")
        return _Gate(self.laid_out(x, nhwc=True), ChannelGate(self.tensor(s), _zero(x), _zero(s), requant))

    def _gate_layer(self, node: Node) -> None:
        """The channel-gate layer (gate.py) of x * s -> Rescale."""
        x, s = (node.lhs, node.rhs) if node.lhs.type.shape == node.type.shape else (node.rhs, node.lhs)
        rescale = next(iter(node.users))
        source = self._compact_nhwc(x)
        out = self._new(rescale.result(), nhwc=True)
        self.values[rescale.result()] = out
        requant = requant_params(rescale.input, rescale.result(), 1, f"'{rescale.name}'")
        self.layers.append(Layer(node.name, node.kind, GateLayer(source, self.tensor(s), out, _zero(x), _zero(s),
                                                                 requant)))

    def _compact_nhwc(self, value: NodeValue) -> DramTensor:
        """`value` as an NHWC image with nothing between pixels (a Concat's part is copied out of its whole)."""
        source = self.laid_out(value, nhwc=True)
        if source.extent == source.elements:
            return source
        compact = self._new(value, nhwc=True, name=f"{value.name}/compact")
        self._copy(compact.name, source, compact)
        return compact

    def _lrn(self, node: Node) -> None:
        """int8 LRN on the vector engine (lrn.py), its table among the constants."""
        x = node.input.type
        table = lrn_table(x.scale, x.offset, node.size, node.alpha, node.beta, node.bias)
        entries = DramTensor(f"{node.name}/table", (table.entries.size,), (4,), "constants",
                             self.add_constant(table.entries.astype("<i4").tobytes()), itemsize=4)
        out = self._new(node.result(), nhwc=True)
        self.values[node.result()] = out
        self.layers.append(Layer(node.name, node.kind, LrnLayer(
            self._compact_nhwc(node.input), out, x.shape[1], node.size, entries, table.index_shift,
            table.fraction_bits, x.offset)))

    # -- vector layers ---------------------------------------------------------------------------------
    def _constant_operand(self, value: NodeValue, shape: tuple[int, ...], nhwc: bool) -> DramTensor:
        """A constant operand (a ReLU's zero, say) materialised at `shape` in the layout of the other operands,
        so that a constant never forces its partner into another layout."""
        full = np.broadcast_to(np.asarray(value.node.value), shape).astype(value.type.dtype)
        data = np.ascontiguousarray(full.transpose(0, 2, 3, 1) if nhwc else full).tobytes()
        strides = nhwc_strides(shape) if nhwc else dense_strides(shape)
        return DramTensor(f"{value.name}/broadcast", shape, strides, "constants", self.add_constant(data),
                          _scale(value), _zero(value))

    def _elementwise(self, node: Node, op: str, operands: list[NodeValue], **extra: Any) -> None:
        """Chunks of the operands in one layout: NHWC when every computed operand is a compact NHWC image
        (constants follow it), else row-major; a computed row broadcast over the other operand's rows is
        broadcast.py's layer."""
        rows = [v for v in operands if v.type.shape != node.type.shape and not isinstance(v.node, Constant)]
        if rows:
            other = next(v for v in operands if v is not rows[0])
            full = (self._constant_operand(other, node.type.shape, False) if isinstance(other.node, Constant)
                    else self.laid_out(other, nhwc=False))
            out = self._new(node.result())
            self.values[node.result()] = out
            self.layers.append(Layer(node.name, node.kind, RowBroadcastLayer(
                op, full, self.laid_out(rows[0], nhwc=False), out, **extra)))
            return
        shape = node.type.shape
        computed = [self.tensor(v) for v in operands if not isinstance(v.node, Constant)]
        nhwc = len(shape) == 4 and all(t.is_nhwc() and t.extent == t.elements for t in computed)
        tensors = [self._constant_operand(v, shape, nhwc) if isinstance(v.node, Constant) else self.laid_out(v, nhwc)
                   for v in operands]
        out = self._new(node.result(), nhwc)
        self.values[node.result()] = out
        self.layers.append(Layer(node.name, node.kind, ElementwiseLayer(op, tensors, out, **extra)))

    def _add(self, node: Node) -> None:
        self._elementwise(node, "Add", [node.lhs, node.rhs], zero=_zero(node.result()))

    def _sub(self, node: Node) -> None:
        self._elementwise(node, "Sub", [node.lhs, node.rhs], zero=_zero(node.result()))

    def _max(self, node: Node) -> None:
        self._elementwise(node, "Max", [node.lhs, node.rhs])

    def _min(self, node: Node) -> None:
        self._elementwise(node, "Min", [node.lhs, node.rhs])

    def _rescale(self, node: Node) -> None:
        r = requant_params(node.input, node.result(), 1, f"'{node.name}'")
        self._elementwise(node, "Rescale", [node.input], zero=_zero(node.input),
                          requant=(int(r.multipliers[0]), int(r.shifts[0]), r.zero))

    def _pool(self, node: Node) -> None:
        x = self.laid_out(node.input, nhwc=True)
        whole = whole_image_window(node)
        rescale = None if whole else self._pool_rescale(node)
        end = node.result() if rescale is None else rescale.result()
        out = self._new(end, nhwc=True) if whole else self._image_out(end)
        self.values[end] = out
        n, c, h, w = node.input.type.shape
        if whole:
            count = DramTensor(f"{node.name}/count", (1,), (4,), "constants",
                               self.add_constant(np.int32(h * w).astype("<i4").tobytes()), itemsize=4)
            op = "max" if node.kind == "MaxPool" else "avg"
            self.layers.append(Layer(node.name, node.kind, GlobalPoolLayer(op, Image.of(x), Image.of(out), c, h, w,
                                                                           count)))
            return
        oh, ow = node.type.shape[2:]
        (kh, kw), (sh, sw) = node.kernel, node.strides
        pt, pl, pb, pr = node.pads
        pads = (pt, pl, max(pb, (oh - 1) * sh + kh - h - pt), max(pr, (ow - 1) * sw + kw - w - pl))
        count_pad = bool(node.attrs.get("count_include_pad", False))
        table = None
        if rescale is not None:
            self.fused.add(id(rescale))
            table = DramTensor(f"{rescale.name}/table", (LUT_BYTES,), (1,), "constants",
                               self.add_constant(Lut8.of([_rescale8(rescale)]).table))
        pool = PoolLayer(node.kind, Image.of(x), Image.of(out), c, h, w, oh, ow, (kh, kw), (sh, sw), pads, count_pad,
                         _zero(node.input), table)
        self.layers.append(Layer(node.name, node.kind, pool if table else separable(pool, self.config) or pool))

    def _pool_rescale(self, node: Node) -> Node | None:
        """The int8 Rescale that is an AveragePool's only reader: the pool's tiles apply it as a table (vector.py),
        and write its result (into its Concat's slice, a ShuffleNet shortcut's)."""
        users = list(node.users)
        if node.kind != "AveragePool" or len(users) != 1 or users[0].kind != "Rescale" or \
                not quantized_form_ok(users[0]):
            return None
        return users[0]

    def _softmax(self, node: Node) -> None:
        source = self.laid_out(node.input, nhwc=False)
        out = self._new(node.result())
        self.values[node.result()] = out
        length = trailing_length(node.input.type.shape, tuple(node.axes))
        table = self.add_constant(softmax_table(_scale(node.input), length))
        self.layers.append(Layer(node.name, node.kind, SoftmaxLayer(source, out, length, table, node.masked,
                                                                 node.wide)))

    def _integerlayernorm(self, node: Node) -> None:
        for name, layer in layernorm_layers(self, node):
            self.layers.append(Layer(name, node.kind, layer))

    def _gather(self, node: Node) -> None:
        self.layers.append(Layer(node.name, node.kind, gather_layer(self, node)))

    def _tablelookup(self, node: Node) -> None:
        self.layers.append(Layer(node.name, node.kind, lut_layer(self, node)))

    # -- data movement -----------------------------------------------------------------------------------
    def _reinterpret(self, node: Node) -> None:
        """The same int8 bytes read with another scale and offset (a division folded into a Rescale): a view."""
        self.values[node.result()] = replace(self.tensor(node.input), name=node.name, scale=_scale(node.result()),
                                             zero=_zero(node.result()))

    def _reshape(self, node: Node) -> None:
        source = self.laid_out(node.input, nhwc=False)
        shape = node.type.shape
        self.values[node.result()] = replace(source, name=node.name, shape=shape, strides=dense_strides(shape))

    def _transpose(self, node: Node) -> None:
        source = self.tensor(node.input)
        perm = node.perm
        view = replace(source, shape=tuple(source.shape[p] for p in perm),
                       strides=tuple(source.strides[p] for p in perm))
        if _read_in_place(node, view):  # the product's loads follow the permuted strides: no copy
            self.values[node.result()] = view
            return
        out = self._new(node.result())
        self.values[node.result()] = out
        self._copy(node.name, view, out)

    def _slice(self, node: Node) -> None:
        view = self.tensor(node.input)
        for axis, (start, end, step) in enumerate(zip(node.starts, node.ends, node.steps)):
            size = node.type.shape[axis]
            view = replace(view.sliced(axis, start, size),
                           strides=view.strides[:axis] + (view.strides[axis] * step,) + view.strides[axis + 1:])
        out = self._new(node.result())
        self.values[node.result()] = out
        self._copy(node.name, view, out)

    def _concat(self, node: Node) -> None:
        """Each part copied into its slice of the result, except the parts their layers wrote there already."""
        parts = [self.tensor(v) for v in node.inputs]
        nhwc = len(node.type.shape) == 4 and all(p.is_nhwc() for p in parts)
        out = self._joined.get(id(node)) or self._new(node.result(), nhwc)
        self.values[node.result()] = out
        start = 0
        for k, (value, part) in enumerate(zip(node.inputs, parts)):
            size = value.type.shape[node.axis]
            target = out.sliced(node.axis, start, size)
            if not (part.region == target.region and part.offset == target.offset and part.same_layout(target)):
                self._copy(f"{node.name}/{k}", part, target)
            start += size

    def _image_out(self, value: NodeValue) -> DramTensor:
        """Where a layer that writes NHWC images through strides (a convolution, a pooling) puts `value`: in its
        slice of the channel Concat that is its only use, so the Concat copies nothing, where every other part
        of the Concat is an NHWC image too; else on its own. (A Concat with a row-major part is row-major, as
        `_concat` lays it out: joining it would make it NHWC, copying the row-major part into it pixel by pixel
        and, before a channel shuffle's Reshape, the whole result back to row-major: shufflenet_v2's units.)"""
        users = list(value.node.users)
        concat = users[0] if len(users) == 1 and users[0].kind == "Concat" else None
        if concat is None or len(concat.type.shape) != 4 or concat.axis % 4 != 1 or \
                sum(v == value for v in concat.inputs) != 1 or \
                not all(self._image_part(v) for v in concat.inputs if v != value):
            return self._new(value, nhwc=True)
        if id(concat) not in self._joined:
            self._joined[id(concat)] = self._new(concat.result(), nhwc=True)
        start = sum(v.type.shape[1] for v in concat.inputs[:list(concat.inputs).index(value)])
        return self._joined[id(concat)].sliced(1, start, value.type.shape[1], name=value.name)

    def _image_part(self, value: NodeValue) -> bool:
        """Whether a Concat's part is an NHWC image: its tensor's layout once built; before, whether a
        convolution or a pooling computes it (through the int8 steps their epilogues take)."""
        if value in self.values:
            return self.values[value].is_nhwc()
        node = value.node
        while node.kind in ("Rescale", "TableLookup", "Max", "Min"):
            computed = [v for v in node.inputs if v is not None and not isinstance(v.node, Constant)]
            if len(computed) != 1 or computed[0] in self.values:
                return False
            node = computed[0].node
        return node.kind in ("Conv", "MaxPool", "AveragePool")


def _conv_shape(node: Node) -> ConvShape:
    """A Conv node's shape, as the layers tile it."""
    _, c, h, w = node.input.type.shape
    _, oc, oh, ow = node.type.shape
    kh, kw = node.kernel
    return ConvShape(c, h, w, oc, oh, ow, kh, kw, tuple(node.strides), tuple(node.dilations), tuple(node.pads[:4]))


LAYERS: dict[str, Callable[[LayerBuilder, Node], None]] = {
    # the border
    "Quantize": LayerBuilder._quantize,
    "Dequantize": LayerBuilder._dequantize,
    # matrix layers (and the layers a product's form routes to: affine, gate, product)
    "Conv": LayerBuilder._conv,
    "MatMul": LayerBuilder._matmul,
    "Mul": LayerBuilder._mul,
    "LRN": LayerBuilder._lrn,
    # vector layers
    "Add": LayerBuilder._add,
    "Sub": LayerBuilder._sub,
    "Max": LayerBuilder._max,
    "Min": LayerBuilder._min,
    "Rescale": LayerBuilder._rescale,
    "MaxPool": LayerBuilder._pool,
    "AveragePool": LayerBuilder._pool,
    "Softmax": LayerBuilder._softmax,
    "IntegerLayerNorm": LayerBuilder._integerlayernorm,
    "Gather": LayerBuilder._gather,
    "TableLookup": LayerBuilder._tablelookup,
    # data movement
    "Reinterpret": LayerBuilder._reinterpret,
    "Reshape": LayerBuilder._reshape,
    "Transpose": LayerBuilder._transpose,
    "Slice": LayerBuilder._slice,
    "Concat": LayerBuilder._concat,
}
"""Graph node kind -> the builder that makes its layers (none for a view). A kind the NPU runs has an entry
here; one without is an error, never a guess."""
