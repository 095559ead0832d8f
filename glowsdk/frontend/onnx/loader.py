"""Reading ONNX files safely: clear errors for bad files, no escape through external data."""
from __future__ import annotations

import os
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import load_external_data_for_model, uses_external_data

from ...errors import ModelFileError


def load_onnx_file(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse an .onnx file and its external data; ModelFileError with the path on any problem."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"{path}: no such file")
    if not path.is_file():
        raise ModelFileError(f"{path}: not a file")
    data = path.read_bytes()
    if not data:
        raise ModelFileError(f"{path}: the file is empty")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise ModelFileError(f"{path}: not a valid ONNX model (protobuf decoding failed: {err})") from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise ModelFileError(f"{path}: not an ONNX model (no IR version or no graph)")
    _load_external_data(model, path.parent.resolve(), path)
    return model


def _load_external_data(model: onnx.ModelProto, folder: Path, path: Path) -> None:
    """Load tensors stored beside the model, refusing locations outside its folder."""
    tensors = [t for t in _all_tensors(model) if uses_external_data(t)]
    for tensor in tensors:
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        target = (folder / location).resolve()
        if not location or os.path.isabs(location) or folder not in target.parents:
            raise ModelFileError(f"{path}: tensor '{tensor.name}' has external data at '{location}', "
                                 f"which is outside the model's folder")
        if not target.is_file():
            raise ModelFileError(f"{path}: tensor '{tensor.name}': external data file '{location}' is missing")
        offset = int(info.get("offset", 0) or 0)
        length = int(info.get("length", 0) or 0)
        if offset < 0 or length < 0 or offset + length > target.stat().st_size:
            raise ModelFileError(f"{path}: tensor '{tensor.name}': external data range "
                                 f"[{offset}, {offset + length}) is outside '{location}'")
    if tensors:
        load_external_data_for_model(model, str(folder))


def _all_tensors(model: onnx.ModelProto):
    yield from model.graph.initializer
    for node in model.graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
