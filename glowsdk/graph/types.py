"""Element kinds and tensor types of the high-level IR (paper 3.2, 4.1).

Every value in a graph has a static `Type`: an element kind and a shape, plus a
scale and offset for quantized kinds, where value = (q - offset) * scale.

The narrow kinds (8- and 4-bit floats, 4- and 2-bit integers) are storage
kinds: values of them can be created, moved, cast and (de)quantized, but they
are neither float nor integer kinds, so arithmetic refuses them. They are held
unpacked, one element per byte, in ml_dtypes' numpy dtypes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import ml_dtypes
import numpy as np


class ElemKind(Enum):
    """Element kinds, named as they print. Quantized kinds end in `q`."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    UINT16 = "uint16"
    INT32 = "int32"
    UINT32 = "uint32"
    INT64 = "int64"
    UINT64 = "uint64"
    BOOL = "bool"
    QINT8 = "int8q"
    QUINT8 = "uint8q"
    QINT32 = "int32q"
    FLOAT8E4M3FN = "float8e4m3fn"
    FLOAT8E4M3FNUZ = "float8e4m3fnuz"
    FLOAT8E5M2 = "float8e5m2"
    FLOAT8E5M2FNUZ = "float8e5m2fnuz"
    FLOAT8E8M0 = "float8e8m0"
    FLOAT4E2M1 = "float4e2m1"
    INT4 = "int4"
    UINT4 = "uint4"
    INT2 = "int2"
    UINT2 = "uint2"

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype that holds this kind's elements (raw integers for quantized)."""
        return _DTYPES[self]

    @property
    def is_float(self) -> bool:
        """Arithmetic float kinds (float32, float16, bfloat16, float64); not the narrow floats."""
        return self in _FLOATS

    @property
    def is_quantized(self) -> bool:
        return self in _QUANTIZED

    @property
    def is_integer(self) -> bool:
        """Plain (non-quantized) arithmetic integer kinds, int64 indices included; not the narrow ints."""
        return self in _INTEGERS

    @property
    def is_narrow(self) -> bool:
        """Storage-only kinds: the 8- and 4-bit floats and the 4- and 2-bit integers."""
        return self in _NARROW_FLOATS or self in _NARROW_INTEGERS

    @property
    def is_narrow_float(self) -> bool:
        """The narrow float kinds (float8 variants and float4e2m1)."""
        return self in _NARROW_FLOATS

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def quantized_storage(self) -> "ElemKind":
        """The plain integer kind a quantized kind is stored as."""
        return {ElemKind.QINT8: ElemKind.INT8, ElemKind.QUINT8: ElemKind.UINT8,
                ElemKind.QINT32: ElemKind.INT32}[self]

    @staticmethod
    def from_dtype(dtype: np.dtype | type) -> "ElemKind":
        """The plain element kind of a numpy dtype; raises KeyError for others."""
        return _FROM_DTYPE[np.dtype(dtype)]


_DTYPES: dict[ElemKind, np.dtype] = {
    ElemKind.FLOAT32: np.dtype(np.float32),
    ElemKind.FLOAT16: np.dtype(np.float16),
    ElemKind.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    ElemKind.FLOAT64: np.dtype(np.float64),
    ElemKind.INT8: np.dtype(np.int8),
    ElemKind.UINT8: np.dtype(np.uint8),
    ElemKind.INT16: np.dtype(np.int16),
    ElemKind.UINT16: np.dtype(np.uint16),
    ElemKind.INT32: np.dtype(np.int32),
    ElemKind.UINT32: np.dtype(np.uint32),
    ElemKind.INT64: np.dtype(np.int64),
    ElemKind.UINT64: np.dtype(np.uint64),
    ElemKind.BOOL: np.dtype(np.bool_),
    ElemKind.QINT8: np.dtype(np.int8),
    ElemKind.QUINT8: np.dtype(np.uint8),
    ElemKind.QINT32: np.dtype(np.int32),
    ElemKind.FLOAT8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    ElemKind.FLOAT8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    ElemKind.FLOAT8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    ElemKind.FLOAT8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    ElemKind.FLOAT8E8M0: np.dtype(ml_dtypes.float8_e8m0fnu),
    ElemKind.FLOAT4E2M1: np.dtype(ml_dtypes.float4_e2m1fn),
    ElemKind.INT4: np.dtype(ml_dtypes.int4),
    ElemKind.UINT4: np.dtype(ml_dtypes.uint4),
    ElemKind.INT2: np.dtype(ml_dtypes.int2),
    ElemKind.UINT2: np.dtype(ml_dtypes.uint2),
}
_FLOATS = {ElemKind.FLOAT32, ElemKind.FLOAT16, ElemKind.BFLOAT16, ElemKind.FLOAT64}
_INTEGERS = {ElemKind.INT8, ElemKind.UINT8, ElemKind.INT16, ElemKind.UINT16, ElemKind.INT32,
             ElemKind.UINT32, ElemKind.INT64, ElemKind.UINT64}
_QUANTIZED = {ElemKind.QINT8, ElemKind.QUINT8, ElemKind.QINT32}
_NARROW_FLOATS = {ElemKind.FLOAT8E4M3FN, ElemKind.FLOAT8E4M3FNUZ, ElemKind.FLOAT8E5M2,
                  ElemKind.FLOAT8E5M2FNUZ, ElemKind.FLOAT8E8M0, ElemKind.FLOAT4E2M1}
_NARROW_INTEGERS = {ElemKind.INT4, ElemKind.UINT4, ElemKind.INT2, ElemKind.UINT2}
_FROM_DTYPE = {dt: k for k, dt in _DTYPES.items() if not k.is_quantized}


@dataclass(frozen=True)
class Type:
    """A static tensor type: element kind, shape, and quantization parameters.

    `scale` and `offset` are set exactly when the kind is quantized. Per-channel
    types (weights quantized per output channel, their int32 accumulators) set
    `axis` and give one scale and one offset per index along it, as tuples.
    """

    elem: ElemKind
    shape: tuple[int, ...]
    scale: float | tuple[float, ...] | None = None
    offset: int | tuple[int, ...] | None = None
    axis: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise ValueError(f"negative dimension in shape {self.shape}")
        if self.elem.is_quantized:
            if self.scale is None or self.offset is None:
                raise ValueError(f"quantized kind {self.elem.value} needs a scale and an offset")
            if self.axis is not None:
                self._check_channels()
                return
            if not (np.isfinite(self.scale) and self.scale > 0):
                raise ValueError(f"quantization scale must be positive and finite, got {self.scale}")
            object.__setattr__(self, "scale", float(self.scale))
            object.__setattr__(self, "offset", int(self.offset))
        elif self.scale is not None or self.offset is not None or self.axis is not None:
            raise ValueError(f"{self.elem.value} is not quantized: it takes no scale, offset or axis")

    def _check_channels(self) -> None:
        if not 0 <= self.axis < len(self.shape):
            raise ValueError(f"per-channel axis {self.axis} is out of range for shape {list(self.shape)}")
        scales, offsets = tuple(float(s) for s in self.scale), tuple(int(o) for o in self.offset)
        if len(scales) != self.shape[self.axis] or len(offsets) != self.shape[self.axis]:
            raise ValueError(f"per-channel axis {self.axis} of shape {list(self.shape)} needs "
                             f"{self.shape[self.axis]} scales and offsets, got {len(scales)} and {len(offsets)}")
        if not all(np.isfinite(s) and s > 0 for s in scales):
            raise ValueError("quantization scales must be positive and finite")
        object.__setattr__(self, "scale", scales)
        object.__setattr__(self, "offset", offsets)

    @property
    def per_channel(self) -> bool:
        return self.axis is not None

    def _along_axis(self, values: float | tuple) -> np.ndarray:
        if self.axis is None:
            return np.asarray(values)
        return np.asarray(values).reshape([-1 if i == self.axis else 1 for i in range(len(self.shape))])

    @property
    def scales(self) -> np.ndarray:
        """The scale as an array that broadcasts against the tensor (a scalar unless per-channel)."""
        return self._along_axis(self.scale).astype(np.float64)

    @property
    def offsets(self) -> np.ndarray:
        """The offset as an array that broadcasts against the tensor (a scalar unless per-channel)."""
        return self._along_axis(self.offset).astype(np.int64)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.elem.itemsize

    @property
    def dtype(self) -> np.dtype:
        return self.elem.dtype

    def with_shape(self, shape: Sequence[int]) -> "Type":
        """Same element kind (and quantization), another shape. A per-channel axis keeps its place
        counted from the last dim, as broadcasting aligns dims, and must keep its length."""
        axis = None if self.axis is None else self.axis - len(self.shape) + len(shape)
        return Type(self.elem, tuple(shape), self.scale, self.offset, axis)

    def with_elem(self, elem: ElemKind) -> "Type":
        """Same shape, another plain element kind."""
        return Type(elem, self.shape)

    def same_elem(self, other: "Type") -> bool:
        """Same element kind and, for quantized kinds, the same scale and offset (per-channel: along
        the same axis counted from the last dim, so the two broadcast channel to channel)."""
        return (self.elem, self.scale, self.offset, self._axis_from_end) == \
            (other.elem, other.scale, other.offset, other._axis_from_end)

    @property
    def _axis_from_end(self) -> int | None:
        return None if self.axis is None else self.axis - len(self.shape)

    def __str__(self) -> str:
        dims = "x".join(str(d) for d in self.shape)
        if self.axis is not None:
            return (f"{self.elem.value}[axis {self.axis}: scales {min(self.scale):.6g}..{max(self.scale):.6g}, "
                    f"offsets {min(self.offset)}..{max(self.offset)}]<{dims}>")
        if self.elem.is_quantized:
            return f"{self.elem.value}[{self.scale:.6g},{self.offset}]<{dims}>"
        return f"{self.elem.value}<{dims}>"

    @staticmethod
    def of(array: np.ndarray) -> "Type":
        """The plain type of a numpy array."""
        return Type(ElemKind.from_dtype(array.dtype), array.shape)


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """Multidirectional (numpy/ONNX) broadcasting; raises ValueError if shapes do not fit."""
    return tuple(np.broadcast_shapes(*[tuple(s) for s in shapes]))
