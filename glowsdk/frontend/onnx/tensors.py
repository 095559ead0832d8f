"""Tensor data from an ONNX model, read only after its header is checked, and the size guard.

The size guard: no tensor the model describes (an initializer, a tensor attribute, a graph
input, the result of any node the importer creates: Range, ConstantOfShape, Expand, Tile, Pad,
Resize...) may exceed `max_tensor_bytes()` — 2 GiB by default, as much as one protobuf message
can hold, or the value of the environment variable GLOWSDK_MAX_TENSOR_BYTES. The check runs
before anything is allocated, so a model asking for 2^40 elements gets a one-line error
naming the node instead of a MemoryError (or the machine's swap).
"""
from __future__ import annotations

import math
import os
from typing import Sequence

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.external_data_helper import uses_external_data

from ...errors import GlowError, ModelFileError, UnsupportedError
from ...graph.types import ElemKind
from .text import shown

MAX_TENSOR_BYTES_VARIABLE = "GLOWSDK_MAX_TENSOR_BYTES"
DEFAULT_MAX_TENSOR_BYTES = 1 << 31


def max_tensor_bytes() -> int:
    """The per-tensor size limit: GLOWSDK_MAX_TENSOR_BYTES if set, else 2 GiB."""
    text = os.environ.get(MAX_TENSOR_BYTES_VARIABLE, "").strip()
    if not text:
        return DEFAULT_MAX_TENSOR_BYTES
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit <= 0:
        raise GlowError(f"{MAX_TENSOR_BYTES_VARIABLE}={shown(text)} is not a positive number of bytes")
    return limit


def _bits(elem: ElemKind) -> int:
    """Bits per element; the narrow integer and float kinds pack below one byte."""
    return {ElemKind.INT4: 4, ElemKind.UINT4: 4, ElemKind.FLOAT4E2M1: 4,
            ElemKind.INT2: 2, ElemKind.UINT2: 2}.get(elem, 8 * elem.itemsize)


def check_size(shape: Sequence[int], elem: ElemKind, where: str) -> None:
    """ModelFileError for a negative dim, UnsupportedError for a tensor above the size limit (an empty
    tensor's dims count too: each 0 as 1)."""
    if any(d < 0 for d in shape):
        raise ModelFileError(f"{where}: shape {list(shape)} has a negative dimension")
    # zeros count as ones: a shape like [0, 2^70] holds nothing, but its strides overflow int64
    count = math.prod(max(d, 1) for d in shape)
    nbytes = -(-count * _bits(elem) // 8)
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise UnsupportedError(f"{where}: a {elem.value} tensor of shape {list(shape)} needs {nbytes} bytes, "
                               f"above the limit of {limit} per tensor (set {MAX_TENSOR_BYTES_VARIABLE} "
                               f"to raise it)")


def elem_of_onnx(data_type: int, where: str) -> ElemKind:
    """The ElemKind of an ONNX TensorProto data type; UnsupportedError for others."""
    try:
        return _ELEM_OF_ONNX[data_type]
    except (KeyError, TypeError):
        name = onnx.TensorProto.DataType.Name(data_type) if data_type in onnx.TensorProto.DataType.values() \
            else shown(str(data_type))
        raise UnsupportedError(f"{where}: element type {name} is not supported by glowsdk") from None


def tensor_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    """The value of a TensorProto as a C-contiguous array of its ElemKind's dtype.

    The header is checked first (element type, no segment, dims, the size limit, data not
    left in an external file), so reading never allocates more than the limit.
    """
    elem = elem_of_onnx(tensor.data_type, where)
    if tensor.HasField("segment"):
        raise UnsupportedError(f"{where}: segmented tensors (the 'segment' field) are not supported")
    if uses_external_data(tensor):
        raise ModelFileError(f"{where}: the data is in an external file that was not loaded "
                             f"(load the model from its .onnx file)")
    check_size(tensor.dims, elem, where)
    try:
        array = numpy_helper.to_array(tensor)
    except (ValueError, TypeError, IndexError, OverflowError) as err:
        raise ModelFileError(f"{where}: cannot read tensor data ({shown(str(err))})") from None
    return np.require(array.astype(elem.dtype, copy=False), requirements="C")  # keeps 0-d arrays 0-d


def sparse_array(sparse: onnx.SparseTensorProto, where: str) -> np.ndarray:
    """A SparseTensorProto as a dense array (indices are linear or one coordinate row per value)."""
    values = tensor_array(sparse.values, f"{where} values")
    indices = tensor_array(sparse.indices, f"{where} indices")
    dims = tuple(int(d) for d in sparse.dims)
    check_size(dims, elem_of_onnx(sparse.values.data_type, where), where)
    size = math.prod(dims)
    if values.ndim != 1 or indices.dtype.kind not in "iu":
        raise ModelFileError(f"{where}: values must be 1-D and indices integers")
    if indices.ndim == 2 and indices.shape == (values.size, len(dims)):
        bounds = np.array(dims, dtype=np.int64)
        if np.any(indices < 0) or np.any(indices >= bounds):
            raise ModelFileError(f"{where}: an index lies outside the shape {list(dims)}")
        flat = np.ravel_multi_index(tuple(indices.astype(np.int64).T), dims) if dims else indices[:, 0]
    elif indices.ndim == 1 and indices.size == values.size:
        if np.any(indices < 0) or np.any(indices >= size):
            raise ModelFileError(f"{where}: an index lies outside the {size} elements of shape {list(dims)}")
        flat = indices.astype(np.int64)
    else:
        raise ModelFileError(f"{where}: indices of shape {list(indices.shape)} do not fit {values.size} values "
                             f"of a rank-{len(dims)} tensor")
    dense = np.zeros(size, dtype=values.dtype)
    dense[flat] = values
    return dense.reshape(dims)


_ELEM_OF_ONNX = {
    onnx.TensorProto.FLOAT: ElemKind.FLOAT32, onnx.TensorProto.FLOAT16: ElemKind.FLOAT16,
    onnx.TensorProto.BFLOAT16: ElemKind.BFLOAT16, onnx.TensorProto.DOUBLE: ElemKind.FLOAT64,
    onnx.TensorProto.INT8: ElemKind.INT8, onnx.TensorProto.UINT8: ElemKind.UINT8,
    onnx.TensorProto.INT16: ElemKind.INT16, onnx.TensorProto.UINT16: ElemKind.UINT16,
    onnx.TensorProto.INT32: ElemKind.INT32, onnx.TensorProto.UINT32: ElemKind.UINT32,
    onnx.TensorProto.INT64: ElemKind.INT64, onnx.TensorProto.UINT64: ElemKind.UINT64,
    onnx.TensorProto.BOOL: ElemKind.BOOL,
    onnx.TensorProto.FLOAT8E4M3FN: ElemKind.FLOAT8E4M3FN,
    onnx.TensorProto.FLOAT8E4M3FNUZ: ElemKind.FLOAT8E4M3FNUZ,
    onnx.TensorProto.FLOAT8E5M2: ElemKind.FLOAT8E5M2,
    onnx.TensorProto.FLOAT8E5M2FNUZ: ElemKind.FLOAT8E5M2FNUZ,
    onnx.TensorProto.FLOAT8E8M0: ElemKind.FLOAT8E8M0, onnx.TensorProto.FLOAT4E2M1: ElemKind.FLOAT4E2M1,
    onnx.TensorProto.INT4: ElemKind.INT4, onnx.TensorProto.UINT4: ElemKind.UINT4,
    onnx.TensorProto.INT2: ElemKind.INT2, onnx.TensorProto.UINT2: ElemKind.UINT2,
}
