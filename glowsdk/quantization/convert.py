"""Quantizing a lowered float graph into integer islands (paper 4.1-4.2, Figure 5).

Each node whose kind has a rule below, whose float32 values the profile covers,
and which the backend runs in its quantized form, is replaced by its quantized
form: operands enter through `Quantize`, the result leaves through `Dequantize`,
so every node is converted on its own. The quantization pipeline then merges
each `Dequantize -> Quantize` pair into a `Rescale` (or nothing, when the types
agree), moves the conversions through layout ops and folds them into
constants, which leaves integer islands with conversions only at their borders.

Activations get int8 types from their profile (calibration method and schema,
see `params.py`). Weights (Constant operands of Conv, MatMul and Mul) are
quantized symmetrically over -127..127 (offset 0), as onnxruntime does, so the
array multiplies raw integers; a MatMul's weight matrix is first clipped to the
bound minimising its own squared quantization error (`params.weight_bounds`),
other weights keep their whole range. With `per_channel`, Conv filters and MatMul weight
matrices get one bound and scale per output channel (filter, or column). Conv
biases, and a constant bias added to a MatMul, become int32 at the accumulator's scale s_x * s_w and are added
before the one requantization (paper 4.3).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..compiler.backend import Backend
from ..compiler.passes import QUANTIZATION, PassManager
from ..errors import GlowError
from ..graph.function import Function, Module
from ..graph.node import Constant, Node, NodeValue, Placeholder
from ..graph.nodes import elementwise as ew
from ..graph.nodes import linalg, nn, quant, reduce, tensor
from ..graph.nodes.layernorm_int8 import layernorm_params, statistics_unused
from ..graph.table import KindTable
from ..graph.types import ElemKind, Type, broadcast_shapes
from ..reference.registry import KERNELS
from .params import CALIBRATIONS, SCHEMAS, calibrated_range, choose_params, weight_bounds, weight_params
from .profile import Profile, check_profile_graph

Rule = Callable[["Quantizer", Node], "dict[NodeValue, NodeValue] | NodeValue | None"]
RULES = KindTable("a quantization rule")
"""How each node kind is quantized; a rule returns the quantized value replacing each float result."""
COMPUTE = frozenset({"Conv", "MatMul", "Softmax", "GlobalAveragePool", "ReduceMean", "LayerNorm"})
"""Kinds worth int8 even when their result goes straight back to float (Softmax, GlobalAveragePool, ReduceMean and
LayerNorm reach the quantizer only on a backend that keeps them unlowered: an integer device's classifier tail, a
transformer's last normalisation). The cheap
kinds (element-wise, layout, pools) are quantized only when a user is too: alone they would only add
conversions and rounding (the Sub of a lowered Softmax, feeding Exp, is the case in point)."""

TABLE_KINDS = (ew.Sigmoid, ew.Tanh, ew.Erf, ew.Exp, ew.Gelu, ew.HardSigmoid, ew.HardSwish, ew.Silu)
"""Unary kinds whose int8 form is one TableLookup: the function at the input's 256 codes, from the kind's reference
kernel in float64 (quant.lookup_table). Converted only for a backend that runs tables (Quantizer.has_rule)."""
_TABLE_KIND_NAMES = frozenset(k.spec.name for k in TABLE_KINDS)

NON_FINITE = "NaN or infinite values"
"""Why a node whose constant operand, or profiled operand or result, holds NaN or infinities stays float: int8
has no code for them (a causal mask's -inf would saturate to a finite value and leak probability)."""


@dataclass(frozen=True)
class QuantizationConfig:
    """What to quantize with: a profile, how to read it (calibration, schema), and what to keep in float.

    `keep_float` names node kinds of the lowered graph (Conv, MatMul, Add, Max...)
    or node names (a name also matches the nodes lowered from it, `relu1/max2`
    matching `relu1`).
    """

    profile: Profile
    schema: str = "asymmetric"
    calibration: str = "minmax"
    per_channel: bool = False
    keep_float: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.schema not in SCHEMAS:
            raise GlowError(f"unknown quantization schema '{self.schema}' (known: {', '.join(SCHEMAS)})")
        if self.calibration not in CALIBRATIONS:
            raise GlowError(f"unknown calibration method '{self.calibration}' (known: {', '.join(CALIBRATIONS)})")
        object.__setattr__(self, "keep_float", frozenset(self.keep_float))

    def describe(self) -> dict:
        return {"schema": self.schema, "calibration": self.calibration, "per_channel": self.per_channel,
                "keep_float": sorted(self.keep_float),
                "profile": self.profile.model}

    def quantize(self, function: Function, backend: Backend, manager: PassManager) -> QuantizationReport:
        """The compile pipeline's quantize step (glowsdk.compiler.pipeline.Quantization): convert `function`
        for `backend`, run the QUANTIZATION pipeline over the islands, then dequantize int32 accumulators
        directly where `backend` does."""
        report = quantize_function(function, self, backend)
        manager.run(QUANTIZATION, function)
        dequantize_accumulators(function, backend)
        return report


@dataclass
class QuantizationReport:
    """Which nodes became integer, and why the others stayed float."""

    quantized: Counter = field(default_factory=Counter)
    kept: dict[str, Counter] = field(default_factory=dict)
    """reason -> node kind -> count"""

    def keep(self, node: Node, reason: str) -> None:
        self.kept.setdefault(reason, Counter())[node.kind] += 1

    def summary(self) -> str:
        done = sum(self.quantized.values())
        kept = sum(sum(c.values()) for c in self.kept.values())
        parts = [f"quantized {done} node(s) to int8"]
        for reason, counts in sorted(self.kept.items()):
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))
            parts.append(f"{sum(counts.values())} kept float ({reason}: {kinds})")
        return "; ".join(parts) if kept else parts[0]

    def to_json(self) -> dict:
        return {"quantized": dict(self.quantized), "kept": {r: dict(c) for r, c in self.kept.items()}}


class Quantizer:
    """The state of one conversion: the function, the config, the backend that must run the result."""

    def __init__(self, function: Function, config: QuantizationConfig, backend: Backend) -> None:
        self.function = function
        self.config = config
        self.backend = backend
        self.report = QuantizationReport()
        self._types: dict[str, Type | None] = {}
        self._profiled_as: dict[str, str] = {}  # a converted result's Dequantize -> the float value it replaced
        self._non_finite: set[str] = set()  # values seen holding NaN or infinities: int8 has neither
        self._masked: set[str] = set()  # values where int8's saturated minimum stands for an attention mask's -inf
        self._tables: bool | None = None  # whether the backend runs TableLookup (asked once)

    def activation_type(self, value: NodeValue) -> Type | None:
        """The int8 type the profile gives a float32 value (None without a profile entry)."""
        if value.type.elem is not ElemKind.FLOAT32:
            return None
        return self.profiled_type(self._profiled_as.get(value.name, value.name), value.type.shape)

    def profiled_type(self, name: str, shape: tuple[int, ...]) -> Type | None:
        """The int8 type of the profile's entry `name` (a value of the graph, or of its lowered form), at `shape`."""
        if name not in self._types:
            entry = self.config.profile.values.get(name)
            if entry is None:
                self._types[name] = None
            elif entry.nan or entry.pos_inf or entry.neg_inf:
                self._types[name] = None
                self._non_finite.add(name)
            else:
                lo, hi = calibrated_range(entry, self.config.calibration)
                scale, offset = choose_params(lo, hi, self.config.schema)
                self._types[name] = Type(ElemKind.QINT8, (), scale, offset)
        found = self._types[name]
        return None if found is None else found.with_shape(shape)

    def mask_type(self, value: NodeValue, type_: Type) -> None:
        """Give a value whose profile saw -inf (an attention mask's sum) the type of its finite part, and mark it
        masked: int8's saturated minimum stands for -inf there."""
        name = self._profiled_as.get(value.name, value.name)
        self._types[name] = type_.with_shape(())
        self._masked.add(name)

    def is_mask_input(self, value: NodeValue) -> bool:
        """A network input the profile saw holding only 0 and -inf (an additive attention mask)."""
        if not isinstance(value.node, Placeholder):
            return False
        entry = self.config.profile.values.get(self._profiled_as.get(value.name, value.name))
        return (entry is not None and entry.neg_inf > 0 and not entry.nan and not entry.pos_inf
                and entry.min in (0.0, None) and entry.max in (0.0, None))

    def is_masked(self, value: NodeValue) -> bool:
        return self._profiled_as.get(value.name, value.name) in self._masked

    def assume_type(self, value: NodeValue, type_: Type) -> None:
        """Give a float value the profile does not name `type_` (a kind kept unlowered, whose lowering named
        the values the profile saw otherwise), so that its users can be quantized."""
        name = self._profiled_as.get(value.name, value.name)
        if name not in self.config.profile.values:
            self._types[name] = type_.with_shape(())

    def constant_type(self, value: NodeValue) -> Type | None:
        """The int8 type covering a float32 Constant's own range (the schema's choice of parameters)."""
        if value.type.elem is not ElemKind.FLOAT32 or not self._finite(value):
            return None
        data = value.node.value
        lo, hi = (float(data.min()), float(data.max())) if data.size else (0.0, 0.0)
        return Type(ElemKind.QINT8, value.type.shape, *choose_params(lo, hi, self.config.schema))

    def _finite(self, value: NodeValue) -> bool:
        """Whether a Constant holds no NaN or infinity (a causal mask's -inf has no int8 code)."""
        if np.isfinite(value.node.value).all():
            return True
        self._non_finite.add(value.name)
        return False

    def quantize(self, value: NodeValue, type_: Type) -> NodeValue:
        """`value` converted to `type_` (its own shape); Constants fold later."""
        return self.function.add(quant.Quantize, value, name=f"{value.name}/{type_.elem.value}",
                                 result_type=type_.with_shape(value.type.shape))

    def operand(self, value: NodeValue, channel_axis: int | None = None, clip: bool = False) -> NodeValue | None:
        """An 8-bit operand of a product: a Constant weight symmetric on its own range (per channel along
        `channel_axis` when the config asks for it), else the profile's type.

        With `clip` (a fully-connected layer's matrix), a Constant is first clipped to the bound minimising
        its own squared quantization error (`params.weight_bounds`). Such matrices are the largest weights
        (1M to 100M values, the largest 5 to 6 standard deviations out), so min-max's grid is up to 1.5
        times coarser than need be, and rounding them was the largest error of vgg19's classifier tail.
        Conv filters keep min-max: clipping them did not lower the bundled nets' error consistently
        (inception_v1's grew), see bench/README.md.
        """
        if isinstance(value.node, Constant) and value.type.elem is ElemKind.FLOAT32:
            if not self._finite(value):
                return None
            per_channel = self.config.per_channel and value.node.value.size > 0
            return self._weight(value, channel_axis if per_channel else None, clip)
        type_ = self.activation_type(value)
        return None if type_ is None else self.quantize(value, type_)

    def _weight(self, value: NodeValue, channel_axis: int | None, clip: bool) -> NodeValue:
        data = value.node.value
        # one row of magnitudes per channel (channel axis first), or one row for the whole tensor
        rows = np.abs(np.moveaxis(data, channel_axis, 0) if channel_axis is not None else data.reshape(1, -1))
        rows = rows.reshape(len(rows), -1)
        largest = rows.max(axis=1, initial=0.0)
        bounds = weight_bounds(rows) if clip else largest
        if np.any(bounds < largest):
            shape = [1] * data.ndim
            if channel_axis is not None:
                shape[channel_axis] = -1
            limit = np.float32(bounds).reshape(shape)
            value = self.function.module.create_constant(f"{value.name}/clipped",
                                                         np.clip(data, -limit, limit)).result()
        scales, offsets = zip(*(weight_params(float(b)) for b in bounds))
        if channel_axis is None:
            return self.quantize(value, Type(ElemKind.QINT8, value.type.shape, scales[0], offsets[0]))
        return self.quantize(value, Type(ElemKind.QINT8, value.type.shape, scales, offsets, channel_axis))

    def bias(self, value: NodeValue, accumulator: Type) -> NodeValue:
        """A float bias added to a MatMul's accumulator (one value per column, the last dim) as int32 at
        the accumulator's scale."""
        axis = None if accumulator.axis is None else value.type.rank - 1
        zeros = 0 if axis is None else accumulator.offset
        return self.quantize(value, Type(ElemKind.QINT32, value.type.shape, accumulator.scale, zeros, axis))

    def add(self, kind: type[Node], *inputs: NodeValue | None, **attrs) -> NodeValue:
        return self.function.add(kind, *inputs, **attrs)

    def has_rule(self, node: Node) -> bool:
        """A rule for `node`'s kind, and for a table kind a backend that runs int8 tables: elsewhere (the cpu,
        the interpreter) Tanh or Exp stay float, and so do their producers (no integer user)."""
        if node.kind in _TABLE_KIND_NAMES:
            return self._runs_tables()
        return node.kind in RULES and (node.kind not in APPLIES or APPLIES[node.kind](node))

    def _runs_tables(self) -> bool:
        """Whether the backend runs a TableLookup, asked once of a probe node in a scratch module."""
        if self._tables is None:
            module = Module()
            probe = module.create_function("probe")
            int8 = Type(ElemKind.QINT8, (1,), 1.0, 0)
            x = module.create_placeholder("x", int8).result()
            table = module.create_constant("table", np.zeros(quant.TABLE_SIZE, np.int8),
                                           int8.with_shape((quant.TABLE_SIZE,))).result()
            self._tables = self.backend.is_op_supported(probe.add(quant.TableLookup, x, table).node)
        return self._tables

    def keeps_float(self, node: Node) -> bool:
        keep = self.config.keep_float
        return node.kind in keep or node.name in keep or node.name.split("/")[0] in keep

    def run(self) -> QuantizationReport:
        """Convert every node that can be; GlowError if the profile was made for another graph, or if
        it or --keep-float match nothing."""
        check_profile_graph(self.config.profile, self.function)
        kinds = sorted({n.kind for n in self.function.nodes if self.has_rule(n)})
        used_keep: set[str] = set()
        for node in list(self.function.nodes):
            if node.function is not self.function or not self.has_rule(node):
                continue
            if not any(v.type.elem is ElemKind.FLOAT32 for v in node.results):
                continue
            if self.keeps_float(node):
                used_keep |= {node.kind, node.name, node.name.split("/")[0]} & self.config.keep_float
                self.report.keep(node, "--keep-float")
                continue
            if node.kind not in COMPUTE and not any(self._quantizable(u) for u in node.users) \
                    and not self._trailing_integer(node):
                self.report.keep(node, "no integer user")
                continue
            self._convert(node)
        unmatched = sorted(self.config.keep_float - used_keep)
        if unmatched:
            raise GlowError(f"--keep-float {unmatched[0]}: no quantizable node has that kind or name "
                            f"(kinds in the lowered graph: {', '.join(kinds) or 'none'})")
        named = any(t is not None for t in self._types.values()) or self._non_finite & set(self._types)
        if self._types and not named:
            raise GlowError(f"the profile (of {self.config.profile.model.get('source', 'a model')}) names none "
                            f"of this graph's values: it was taken of another model or with other options")
        self.function.erase_dead()
        return self.report

    def _trailing_integer(self, node: Node) -> bool:
        """A cheap node whose results only leave the graph (a network ending in ReLU), on a backend that cannot run
        it in float: converted all the same, so the island reaches the output (an integer device would otherwise
        need the host for the last Max). Where the backend runs it in float, it stays float, as before."""
        return bool(node.users) and all(u.kind == "Save" for u in node.users) and not self.backend.is_op_supported(node)

    def _quantizable(self, node: Node) -> bool:
        return self.has_rule(node) and not self.keeps_float(node)

    def _convert(self, node: Node) -> None:
        before = set(map(id, self.function.nodes))
        with self.function.inserting_before(node):
            produced = RULES[node.kind](self, node)
            if produced is None:
                self._roll_back(before)
                seen = {self._profiled_as.get(v.name, v.name) for v in (*node.present_inputs(), *node.results)}
                self.report.keep(node, NON_FINITE if seen & self._non_finite else "no profile")
                return
            replaced = produced if isinstance(produced, dict) else {node.result(): produced}
            created = [n for n in self.function.nodes if id(n) not in before]
            if not all(self.backend.is_op_supported(n) for n in created):
                self._roll_back(before)
                self.report.keep(node, f"not run quantized by {self.backend.name}")
                return
            for old, new in replaced.items():
                dequantized = self.add(quant.Dequantize, new, elem=old.type.elem)
                self._profiled_as[dequantized.name] = self._profiled_as.get(old.name, old.name)
                self.function.replace_all_uses(old, dequantized)
        for old in replaced:
            if old.node.function is self.function and not old.node.users:
                self.function.erase(old.node)
        self.report.quantized[node.kind] += 1

    def _roll_back(self, before: set[int]) -> None:
        for created in reversed([n for n in self.function.nodes if id(n) not in before]):
            self.function.erase(created)


def quantize_function(function: Function, config: QuantizationConfig, backend: Backend) -> QuantizationReport:
    """Convert `function` (lowered, optimised, named as when the profile was taken) in place."""
    return Quantizer(function, config, backend).run()


def dequantize_accumulators(function: Function, backend: Backend) -> int:
    """Dequantize(Rescale(accumulator)) -> Dequantize(accumulator) where `backend` dequantizes int32.

    An island ending in float (a classifier's logits before Softmax) then loses
    no precision to an 8-bit requantization nobody needs. Run after the
    quantization pipeline; returns how many borders changed.
    """
    changed = 0
    for node in list(function.nodes):
        rescale = node.input.node if node.kind == "Dequantize" else None
        if not isinstance(rescale, quant.Rescale) or rescale.input.type.elem is not ElemKind.QINT32:
            continue
        with function.inserting_before(node):
            direct = function.add(quant.Dequantize, rescale.input, name=f"{node.name}/int32", elem=node.elem)
        if not backend.is_op_supported(direct.node):
            function.erase(direct.node)
            continue
        function.replace_all_uses(node.result(), direct)
        changed += 1
    function.erase_dead()
    return changed


# -- the rules ------------------------------------------------------------------------------------
def _requantized(q: Quantizer, accumulator: NodeValue, result: NodeValue) -> NodeValue | None:
    out = _reader_type(q, result) or q.activation_type(result)
    return None if out is None else q.add(quant.Rescale, accumulator, result_type=out)


def _reader_type(q: Quantizer, result: NodeValue) -> Type | None:
    """The type the same-type Add or Sub that is `result`'s only reader works in, if it has one: the accumulator
    is then requantized once, straight into it, where its own type would clip it to its calibrated range (a clamp
    the float graph does not have; the Add's type holds that range) and the Add would rescale it again."""
    users = list(result.node.users)
    if len(users) != 1 or users[0].kind not in ("Add", "Sub") or not q._quantizable(users[0]) or any(
            _mask(v) is not None or q.is_mask_input(v) for v in users[0].inputs):
        return None
    shared = _shared_type(q, users[0])
    return None if shared is None else shared.with_shape(result.type.shape)


def _shared_type(q: Quantizer, node: Node) -> Type | None:
    """The type of a same-type Add or Sub: one holding its operands' ranges and its result's (an operand may reach
    further than the sum: x + (-x)); None without a profile for each."""
    out = q.activation_type(node.result())
    operands = [q.constant_type(v) if isinstance(v.node, Constant) else q.activation_type(v) for v in node.inputs]
    if out is None or None in operands:
        return None
    return quant.covering_type([*operands, out], out.shape)


@RULES.register(nn.Conv)
def _conv(q: Quantizer, node: Node) -> NodeValue | None:
    x, w = q.operand(node.input), q.operand(node.filter, channel_axis=0)
    if x is None or w is None:
        return None
    bias = None if node.bias is None else q.quantize(node.bias, nn.quantized_bias_type(x.type, w.type))
    return _requantized(q, q.add(nn.Conv, x, w, bias, **node.attrs), node.result())


def _constant_bias(add: Node, product: NodeValue) -> NodeValue | None:
    """The Constant that `add` adds to `product` along its last dim, if it is one."""
    other = add.rhs if add.lhs == product else add.lhs
    if not isinstance(other.node, Constant) or other == product:
        return None
    shape = other.type.shape
    if add.type.shape != product.type.shape or len(shape) > product.type.rank or any(d != 1 for d in shape[:-1]):
        return None
    return other if add.kind == "Add" else None


@RULES.register(linalg.MatMul)
def _matmul(q: Quantizer, node: Node) -> dict[NodeValue, NodeValue] | NodeValue | None:
    lhs, rhs = q.operand(node.lhs), q.operand(node.rhs, channel_axis=node.rhs.type.rank - 1, clip=True)
    if lhs is None or rhs is None:
        return None
    accumulator = q.add(linalg.MatMul, lhs, rhs)
    users = list(node.users)
    bias = _constant_bias(users[0], node.result()) if len(users) == 1 and users[0].kind == "Add" else None
    if bias is not None and q.activation_type(users[0].result()) is not None:
        summed = q.add(ew.Add, accumulator, q.bias(bias, accumulator.type))
        return {users[0].result(): _requantized(q, summed, users[0].result())}
    return _requantized(q, accumulator, node.result())


@RULES.register(ew.Mul)
def _mul(q: Quantizer, node: Node) -> dict[NodeValue, NodeValue] | NodeValue | None:
    """A constant added to the product (a standalone BatchNorm's x * a[c] + b[c]) joins the int32
    accumulator before the one requantization, as a MatMul's bias does, where the backend runs that form."""
    lhs, rhs = q.operand(node.lhs), q.operand(node.rhs)
    if lhs is None or rhs is None:
        return None
    product = q.add(ew.Mul, lhs, rhs)
    users = list(node.users)
    add = users[0] if len(users) == 1 and users[0].kind == "Add" else None
    other = None if add is None else add.rhs if add.lhs == node.result() else add.lhs
    if (other is not None and isinstance(other.node, Constant) and add.type.shape == node.type.shape
            and q.activation_type(add.result()) is not None):
        bias = q.bias(other, product.type)
        summed = q.add(ew.Add, product, bias)
        rescaled = _requantized(q, summed, add.result())
        if all(q.backend.is_op_supported(n) for n in (summed.node, rescaled.node)):
            return {add.result(): rescaled}
        for created in (rescaled.node, summed.node, bias.node):
            q.function.erase(created)
    return _requantized(q, product, node.result())


@RULES.register(ew.Max, ew.Min, tensor.Concat)
def _same_type(q: Quantizer, node: Node) -> NodeValue | None:
    """Operands and result share the result's type, so the op works on raw integers (paper 4.3); saturating
    an operand to it is exact, as clamping commutes with max, min and concatenation."""
    out = q.activation_type(node.result())
    if out is None:
        return None
    return q.add(type(node), *(q.quantize(v, out) for v in node.inputs), **node.attrs)


def _mask(value: NodeValue) -> np.ndarray | None:
    """A constant holding only 0 and -inf (some of it -inf): an attention mask, as a boolean array (True: -inf)."""
    if not isinstance(value.node, Constant) or value.type.elem is not ElemKind.FLOAT32:
        return None
    data = np.asarray(value.node.value)
    masked = np.isneginf(data)
    return masked if masked.any() and ((data == 0) | masked).all() else None


def _masked_add(q: Quantizer, node: Node) -> NodeValue | None:
    """x + M with M a constant of 0 and -inf: x where M is 0 and int8's saturated minimum where it is -inf, as
    Min(x, C) with C = 127 or -128 (x's own type: a mask moves no value). The result is marked as masked, so
    that a Softmax reading it treats -128 as -inf (nn.Softmax's `masked`)."""
    for value, other in ((node.lhs, node.rhs), (node.rhs, node.lhs)):
        masked = _mask(other)
        type_ = None if masked is None and not q.is_mask_input(other) else q.activation_type(value)
        if type_ is None or broadcast_shapes(value.type.shape, other.type.shape) != value.type.shape:
            continue
        if masked is not None:
            bound = q.function.module.create_constant(
                f"{node.name}/mask", np.where(masked, -128, 127).astype(np.int8), type_.with_shape(other.type.shape))
            bound = bound.result()
        else:  # a mask the host gives: 0 -> 127 and -inf -> -128 (Quantize saturates), read in x's type
            codes = q.quantize(other, Type(ElemKind.QINT8, other.type.shape, type_.scale, 127))
            bound = q.add(quant.Reinterpret, codes, result_type=type_.with_shape(other.type.shape))
        q.mask_type(node.result(), type_)
        return q.add(ew.Min, q.quantize(value, type_), bound)
    return None


def _positive_scalar(value: NodeValue) -> float | None:
    data = value.node.value if isinstance(value.node, Constant) else None
    if data is None or np.size(data) != 1 or not np.isfinite(data).all() or float(np.ravel(data)[0]) <= 0:
        return None
    return float(np.ravel(data)[0])


@RULES.register(ew.Div)
def _divide_by_constant(q: Quantizer, node: Node) -> NodeValue | None:
    """x / c for a positive constant c and x an int32 accumulator (attention's scores / sqrt(d)): the
    accumulator requantized to the result's type with its scale times c, then read as that type (a division
    folded into the one rounding the accumulator needs anyway)."""
    divisor = _positive_scalar(node.rhs)
    inner = node.lhs.node
    out = q.activation_type(node.result())
    if divisor is None or not isinstance(inner, quant.Dequantize) or out is None:
        return None
    source = inner.input.type
    if source.per_channel or source.elem not in (ElemKind.QINT32, ElemKind.QINT8):
        return None
    scaled = Type(ElemKind.QINT8, out.shape, float(np.float32(out.scale * divisor)), out.offset)
    return q.add(quant.Reinterpret, q.add(quant.Rescale, inner.input, result_type=scaled), result_type=out)


APPLIES: dict[str, Callable[[Node], bool]] = {"Div": lambda node: _positive_scalar(node.rhs) is not None}
"""Kinds whose rule covers only some of their nodes (a Div by a positive constant): the others are not reported."""


@RULES.register(ew.Add, ew.Sub)
def _common_type(q: Quantizer, node: Node) -> NodeValue | None:
    """Operands and result share a type (`_shared_type`), then the sum is requantized to the result's type if that
    differs; an Add of an attention mask is `_masked_add`."""
    if node.kind == "Add":
        masked = _masked_add(q, node)
        if masked is not None:
            return masked
    common = _shared_type(q, node)
    if common is None:
        return None
    out = q.activation_type(node.result())
    result = q.add(type(node), *(q.quantize(v, common) for v in node.inputs))
    return result if common == out else q.add(quant.Rescale, result, result_type=out)


@RULES.register(nn.MaxPool, nn.AveragePool, tensor.Reshape, tensor.Transpose, tensor.Slice, tensor.Expand)
def _keeps_type(q: Quantizer, node: Node) -> NodeValue | None:
    """Layout ops and pools keep their input's type: no rounding beyond the op's own."""
    type_ = q.activation_type(node.input)
    if type_ is None:
        return None
    return q.add(type(node), q.quantize(node.input, type_), **node.attrs)


@RULES.register(nn.Softmax)
def _softmax(q: Quantizer, node: Node) -> NodeValue | None:
    """int8 in, the fixed int8 type of probabilities out (nn.Softmax's doc gives the integer semantics); where the
    probabilities are the network's output, the wide int32q type (2^-16 steps), which keeps their ranking."""
    type_ = q.activation_type(node.input)
    if type_ is None:
        return None
    wide = bool(node.users) and all(u.kind == "Save" for u in node.users)  # the probabilities leave the network
    return q.add(nn.Softmax, q.quantize(node.input, type_), axes=node.axes, masked=q.is_masked(node.input),
                 wide=wide)


@RULES.register(nn.GlobalAveragePool)
def _global_average_pool(q: Quantizer, node: Node) -> NodeValue | None:
    """int8: the AveragePool of the whole image in the input's type (its rounded integer mean), which is also
    the result's type when the profile saw only the lowered form. The float kind reaches the quantizer only on
    a backend that keeps it unlowered (an integer device's classifier tail)."""
    type_ = q.activation_type(node.input)
    if type_ is None:
        return None
    spatial = node.input.type.shape[2:]
    q.assume_type(node.result(), type_)
    return q.add(nn.AveragePool, q.quantize(node.input, type_), kernel=spatial, strides=(1,) * len(spatial),
                 pads=(0,) * (2 * len(spatial)), dilations=(1,) * len(spatial))


@RULES.register(reduce.ReduceMean)
def _spatial_mean(q: Quantizer, node: Node) -> NodeValue | None:
    """A ReduceMean over the spatial dims of an NCHW (or NCL) image is global average pooling (torchvision's MNASNet
    and ShuffleNetV2 write `x.mean([2, 3])`): the AveragePool of the whole image, then a Reshape without keepdims.
    The float kind reaches the quantizer only on a backend that keeps this form unlowered."""
    rank = node.input.type.rank
    if rank not in (3, 4) or tuple(node.axes) != tuple(range(2, rank)):
        return None
    pooled = _global_average_pool(q, node)
    if pooled is None or node.keepdims:
        return pooled
    return q.add(tensor.Reshape, pooled, shape=node.type.shape)


@RULES.register(nn.LRN)
def _lrn(q: Quantizer, node: Node) -> NodeValue | None:
    """int8 in, the same type out (nn.LRN's doc: integer semantics; |y| <= |x| for bias >= 1), which is also
    the result's type when the profile saw only the lowered form (a backend keeps LRN unlowered)."""
    type_ = q.activation_type(node.input)
    if type_ is None or node.bias < 1:
        return None
    q.assume_type(node.result(), type_)
    return q.add(nn.LRN, q.quantize(node.input, type_), **node.attrs)


@RULES.register(tensor.Gather)
def _gather(q: Quantizer, node: Node) -> NodeValue | None:
    """Picked values keep the table's type: a constant table (an embedding) quantized over its own range, so
    that no row saturates whichever the indices pick; a computed one at its profiled type."""
    type_ = q.constant_type(node.data) if isinstance(node.data.node, Constant) else q.activation_type(node.data)
    if type_ is None:
        return None
    return q.add(tensor.Gather, q.quantize(node.data, type_), node.indices, **node.attrs)


def _lowered_result(q: Quantizer, node: Node) -> Type | None:
    """The profile's type of a kept-unlowered node's result, named after the last node of its lowering
    (`{name}/add16`: the lowering numbers the nodes it makes) when the profile saw the lowered form."""
    prefix = f"{node.name}/"
    steps = [(int(digits), name) for name in q.config.profile.values if name.startswith(prefix)
             and (digits := name[len(prefix):].lstrip("abcdefghijklmnopqrstuvwxyz_")).isdigit()]
    return q.profiled_type(max(steps)[1], node.types[0].shape) if steps else None


@RULES.register(nn.LayerNorm)
def _layer_norm(q: Quantizer, node: Node) -> NodeValue | None:
    """int8 in, int8 out in integers only (quant.IntegerLayerNorm, layernorm_int8.py) for a LayerNorm over the last
    dim with constant scale and bias whose statistics nobody reads (a backend keeps it unlowered)."""
    rank = node.input.type.rank
    if node.axis not in (rank - 1, -1) or not statistics_unused(node):
        return None
    if not isinstance(node.scale.node, Constant) or (node.bias is not None and not isinstance(node.bias.node,
                                                                                                 Constant)):
        return None
    source = q.activation_type(node.input)
    result = q.activation_type(node.result()) or _lowered_result(q, node)
    if source is None or result is None:
        return None
    q.assume_type(node.result(), result)
    length = node.input.type.shape[-1]
    gamma = np.broadcast_to(np.asarray(node.scale.node.value, np.float64).reshape(-1), (length,))
    beta = np.zeros(length) if node.bias is None else np.broadcast_to(
        np.asarray(node.bias.node.value, np.float64).reshape(-1), (length,))
    params = layernorm_params(gamma, beta, node.epsilon, source.scale, result.scale)
    module = q.function.module
    constants = [module.create_constant(f"{node.name}/{what}", values, Type(ElemKind.INT32, (length,))).result()
                 for what, values in (("gamma", params.gamma), ("beta", params.beta))]
    return q.add(quant.IntegerLayerNorm, q.quantize(node.input, source), *constants, epsilon=params.epsilon,
                 shift=params.shift, result_type=result)


@RULES.register(*TABLE_KINDS)
def _table(q: Quantizer, node: Node) -> NodeValue | None:
    """int8 in, int8 out through the table of the function at the input's 256 codes (quant.lookup_table). The
    result's type is the profile's, or, where the profile saw only the lowered form (a backend keeps Gelu or
    Sigmoid unlowered), the one covering the values the function takes at those codes."""
    def f(x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(KERNELS[node.kind](node, x), np.float64)

    source = q.activation_type(node.input)
    values = None if source is None else f(quant.code_values(source))
    if values is None or not np.isfinite(values).all():
        return None
    result = q.activation_type(node.result())
    if result is None:
        result = Type(ElemKind.QINT8, node.type.shape,
                      *choose_params(float(values.min()), float(values.max()), q.config.schema))
        q.assume_type(node.result(), result)
    table = quant.lookup_table(f, source, result)
    constant = q.function.module.create_constant(f"{node.name}/table", table, result.with_shape((quant.TABLE_SIZE,)))
    return q.add(quant.TableLookup, q.quantize(node.input, source), constant.result())
