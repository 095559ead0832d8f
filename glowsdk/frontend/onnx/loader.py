"""Reading ONNX files safely: clear errors for bad files, no escape through external data."""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import uses_external_data

from ...errors import ModelFileError, UnsupportedError
from .tensors import MAX_TENSOR_BYTES_VARIABLE, max_tensor_bytes
from .text import shown
from .validate import check_strings


def load_onnx_file(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse an .onnx file and its external data; ModelFileError with the path on any problem."""
    path = Path(path)
    where = shown(str(path))
    if not path.exists():
        raise ModelFileError(f"{where}: no such file")
    if not path.is_file():
        raise ModelFileError(f"{where}: not a file")
    data = path.read_bytes()
    if not data:
        raise ModelFileError(f"{where}: the file is empty")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise ModelFileError(f"{where}: not a valid ONNX model (protobuf decoding failed: {err})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ModelFileError(f"{where}: not an ONNX model (no IR version or no graph)")
    check_strings(model, where)
    _load_external_data(model, path.parent.resolve(), where)
    return model


def _load_external_data(model: onnx.ModelProto, folder: Path, where: str) -> None:
    """Read the data of tensors stored beside the model into them, refusing locations outside its
    folder and offsets or lengths that are not whole numbers inside the file.

    Sub-graph tensors (an If's branches) are read too, under the same rules.
    """
    for tensor in _all_tensors(model.graph):
        if not uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        about = f"{where}: tensor '{shown(tensor.name)}'"
        location = info.get("location", "")
        if "\0" in location:
            raise ModelFileError(f"{about}: the external data location '{shown(location)}' holds a NUL character")
        target = (folder / location).resolve()
        if not location or os.path.isabs(location) or folder not in target.parents:
            raise ModelFileError(f"{about} has external data at '{shown(location)}', "
                                 f"which is outside the model's folder")
        if not target.is_file():
            raise ModelFileError(f"{about}: external data file '{shown(location)}' is missing")
        size = target.stat().st_size
        offset = _whole_number(info, "offset", 0, about)
        length = _whole_number(info, "length", size - offset, about)
        if offset + length > size:
            raise ModelFileError(f"{about}: external data range [{offset}, {offset + length}) is outside "
                                 f"'{shown(location)}' ({size} bytes)")
        if length > max_tensor_bytes():
            raise UnsupportedError(f"{about}: {length} bytes of external data, above the limit of "
                                   f"{max_tensor_bytes()} per tensor (set {MAX_TENSOR_BYTES_VARIABLE} to raise it)")
        with open(target, "rb") as f:
            f.seek(offset)
            tensor.raw_data = f.read(length)
        del tensor.external_data[:]
        tensor.data_location = onnx.TensorProto.DEFAULT


def _whole_number(info: dict[str, str], key: str, default: int, about: str) -> int:
    """An external-data field (`offset`, `length`): decimal digits only, else ModelFileError."""
    text = info.get(key)
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()):
        raise ModelFileError(f"{about}: external data {key} '{shown(text)}' is not a whole number of bytes")
    return int(text)


def _all_tensors(graph: onnx.GraphProto):
    """Every tensor of `graph` and its sub-graphs: initializers, sparse ones, tensor attributes."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values
                yield attr.sparse_tensor.indices
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_tensors(sub)
