"""The "light" model-zoo networks the onnx package ships, and their reference cases.

onnx carries nine ImageNet classifiers in `backend/test/data/light/`, with the
weights stored as ConstantOfShape fills, one reference output each, and a
tolerance per model in `backend/test/data/real/test_<name>/data.json`. The
reference output was computed on the input the onnx backend runner generates:
`arange(n).reshape(shape) / n` in float32 (its `generate_dummy_data` with
`random=False`), which `reference_case` rebuilds.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import GlowError

BUNDLED: tuple[str, ...] = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                            "shufflenet", "squeezenet", "vgg19", "zfnet512")

_DATA = Path(onnx.__file__).resolve().parent / "backend" / "test" / "data"


@dataclass
class ReferenceCase:
    """One bundled model's reference run: its input, the shipped output, the tolerance."""

    name: str
    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    rtol: float
    atol: float


def is_bundled(name: str) -> bool:
    return name in BUNDLED


def bundled_path(name: str) -> Path:
    """The .onnx file of bundled model `name`, inside the installed onnx package."""
    if not is_bundled(name):
        raise GlowError(f"unknown bundled model '{name}'; bundled models: {', '.join(BUNDLED)}")
    path = _DATA / "light" / f"light_{name}.onnx"
    if not path.is_file():
        raise GlowError(f"bundled model '{name}' is missing from the installed onnx package ({path})")
    return path


def load_bundled(name: str) -> onnx.ModelProto:
    return onnx.load(str(bundled_path(name)))


def reference_case(name: str, model: onnx.ModelProto | None = None) -> ReferenceCase:
    """The input, expected outputs and tolerance of bundled model `name`.

    Pass `model` when it is already loaded, to save reading it again.
    """
    path = bundled_path(name)
    model = model if model is not None else onnx.load(str(path))
    initializers = {t.name for t in model.graph.initializer}
    inputs = {v.name: _dummy_input(v) for v in model.graph.input if v.name not in initializers}
    outputs = {}
    for i, value in enumerate(model.graph.output):
        tensor_path = path.with_name(f"light_{name}_output_{i}.pb")
        outputs[value.name] = numpy_helper.to_array(onnx.load_tensor(str(tensor_path)))
    tolerance = json.loads((_DATA / "real" / f"test_{name}" / "data.json").read_text())
    return ReferenceCase(name, inputs, outputs, float(tolerance["rtol"]), float(tolerance["atol"]))


def _dummy_input(value: onnx.ValueInfoProto) -> np.ndarray:
    """The onnx runner's deterministic input: a ramp over [0, 1), symbolic dims taken as 1."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in value.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)
