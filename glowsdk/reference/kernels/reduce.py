"""Reference kernels of the reduction node kinds."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ...graph.nodes import reduce as rd
from ..registry import kernel


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Half-precision floats accumulate in float32; every other kind in itself (integers wrap)."""
    if dtype.kind in "fV" and dtype.itemsize < 4:  # float16, and bfloat16 (an ml_dtypes void kind)
        return np.dtype(np.float32)
    return dtype


def _sum(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    return np.add.reduce(x, axis=axes, dtype=_accumulator(x.dtype), keepdims=True)


def _lowest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return False
    return np.iinfo(dtype).min if dtype.kind in "iu" else -np.inf


def _highest(dtype: np.dtype) -> object:
    if dtype == np.bool_:
        return True
    return np.iinfo(dtype).max if dtype.kind in "iu" else np.inf


def _mean(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """The sum over the count; for integers the sum wraps in x's kind, as ONNX's does."""
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    return _sum(x, axes) / count


def _square(x: np.ndarray) -> np.ndarray:
    """x * x in the accumulator kind (integers wrap, as they would in x's kind)."""
    wide = x.astype(_accumulator(x.dtype))
    return wide * wide


def _widen_integers(x: np.ndarray) -> np.ndarray:
    """Integers as 64-bit, so a sum of squares under a square root does not wrap."""
    if x.dtype.kind in "iu":
        return x.astype(np.int64 if x.dtype.kind == "i" else np.uint64)
    return x


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Shift by the largest finite element so exp cannot overflow; infinities pass through."""
    acc = _accumulator(x.dtype)
    wide = x.astype(acc)
    finite_max = np.maximum.reduce(np.where(np.isfinite(wide), wide, -np.inf), axis=axes, keepdims=True,
                                   initial=-np.inf)
    shift = np.where(np.isfinite(finite_max), finite_max, 0).astype(acc)
    return np.log(np.add.reduce(np.exp(wide - shift), axis=axes, keepdims=True)) + shift


_REDUCE: dict[type, Callable[[np.ndarray, tuple[int, ...]], np.ndarray]] = {
    rd.ReduceSum: _sum,
    rd.ReduceMean: _mean,
    rd.ReduceProd: lambda x, axes: np.multiply.reduce(x, axis=axes, dtype=_accumulator(x.dtype),
                                                      keepdims=True),
    rd.ReduceMax: lambda x, axes: np.maximum.reduce(x, axis=axes, keepdims=True, initial=_lowest(x.dtype)),
    rd.ReduceMin: lambda x, axes: np.minimum.reduce(x, axis=axes, keepdims=True, initial=_highest(x.dtype)),
    rd.ReduceL1: lambda x, axes: _sum(np.abs(x), axes),
    rd.ReduceL2: lambda x, axes: np.sqrt(_sum(_square(_widen_integers(x)), axes)),
    rd.ReduceSumSquare: lambda x, axes: _sum(_square(x), axes),
    rd.ReduceLogSum: lambda x, axes: np.log(_sum(x, axes)),
    rd.ReduceLogSumExp: _log_sum_exp,
}
"""Each reduction keeps the reduced axes (size 1); the kernel drops them unless keepdims."""


def _reduction(fn: Callable[[np.ndarray, tuple[int, ...]], np.ndarray]):
    """The kernel of one reduction; float results of integer reductions truncate toward zero."""

    def run(node, x):
        result = fn(x, node.axes)
        if np.issubdtype(node.type.dtype, np.integer) and result.dtype.kind == "f":
            result = np.trunc(result)
        return result.reshape(node.type.shape)

    return run


for _kind, _fn in _REDUCE.items():
    kernel(_kind)(_reduction(_fn))


def _arg_extreme(pick: Callable[..., np.ndarray]):
    """ArgMax/ArgMin; the last extreme index is the first one of the reversed axis."""

    def run(node, x):
        axis = node.axis
        if node.select_last_index:
            index = x.shape[axis] - 1 - pick(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            index = pick(x, axis=axis, keepdims=True)
        return index.reshape(node.type.shape).astype(np.int64)

    return run


kernel(rd.ArgMax)(_arg_extreme(np.argmax))
kernel(rd.ArgMin)(_arg_extreme(np.argmin))


@kernel(rd.TopK)
def _topk(node, x):
    axis, k = node.axis, node.k
    if node.largest:
        # A stable ascending sort of the reversed axis, read backwards, is descending with
        # ties in ascending index order.
        n = x.shape[axis]
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, indices, axis=axis), indices.astype(np.int64)


@kernel(rd.CumSum)
def _cumsum(node, x):
    axis = node.axis
    data = np.flip(x, axis) if node.reverse else x
    total = np.cumsum(data, axis=axis, dtype=_accumulator(x.dtype))
    if node.exclusive:
        # Shift by one along the axis: element i holds the sum of the elements before i.
        shifted = np.zeros_like(total)
        head = [slice(None)] * x.ndim
        tail = [slice(None)] * x.ndim
        head[axis], tail[axis] = slice(1, None), slice(None, -1)
        shifted[tuple(head)] = total[tuple(tail)]
        total = shifted
    return np.flip(total, axis) if node.reverse else total
