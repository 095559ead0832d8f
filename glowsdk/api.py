"""The Python API, as small as onnxruntime's: load, compile, run.

    net = glowsdk.load("resnet50", random_weights=0)
    exe = glowsdk.compile(net, target="interpreter")
    outputs = exe.run({"gpu_0/data_0": image})

The CLI is a thin layer over these functions.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from . import zoo
from .backends.registry import get_backend
from .compiler.backend import Backend, CompiledFunction, CompileOptions, TensorInfo
from .compiler.pipeline import compile_function
from .errors import GlowError, ModelFileError
from .frontend.onnx.importer import import_model
from .frontend.onnx.loader import load_onnx_file
from .graph.function import Function, Module
from .quantization.convert import QuantizationConfig


class Network:
    """A loaded network: a verified Module whose function `main` is the model."""

    def __init__(self, module: Module, source: str) -> None:
        self.module = module
        self.source = source

    @property
    def function(self) -> Function:
        return self.module.functions["main"]

    @property
    def inputs(self) -> list[TensorInfo]:
        return [TensorInfo(p.name, p.type) for p in self.function.input_placeholders()]

    @property
    def outputs(self) -> list[TensorInfo]:
        return _named(self.module, [TensorInfo(p.name, p.type) for p in self.function.output_placeholders()])

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Seeded random values for every input."""
        return zoo.random_inputs(self.inputs, seed)


class CompiledNetwork:
    """A network compiled for one target."""

    def __init__(self, network: Network, target: str, compiled: CompiledFunction) -> None:
        self.network = network
        self.target = target
        self.compiled = compiled

    @property
    def inputs(self) -> list[TensorInfo]:
        return self.compiled.inputs

    @property
    def outputs(self) -> list[TensorInfo]:
        return _named(self.network.module, self.compiled.outputs)

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on named numpy arrays; returns the outputs by name (the model's names)."""
        renamed = self.network.module.output_names
        return {renamed.get(k, k): v for k, v in self.compiled.execute(dict(inputs)).items()}


def _named(module: Module, outputs: list[TensorInfo]) -> list[TensorInfo]:
    """`outputs` under the model's names (an output that is also an input has a placeholder of another name)."""
    return [TensorInfo(module.output_names.get(t.name, t.name), t.type) for t in outputs]


def read_model(model: str | os.PathLike | onnx.ModelProto) -> tuple[onnx.ModelProto, str]:
    """An ONNX model from a path, a bundled name, or a ModelProto; with a name for messages."""
    if isinstance(model, onnx.ModelProto):
        return model, model.graph.name or "model"
    path = os.fspath(model)
    if os.path.exists(path):
        return load_onnx_file(path), path
    if zoo.is_bundled(path):
        return load_onnx_file(zoo.bundled_path(path)), path
    if path.endswith(".onnx") or os.sep in path:
        raise ModelFileError(f"{path}: no such file")
    raise GlowError(f"'{path}' is neither a file nor a bundled model "
                    f"(bundled: {', '.join(zoo.BUNDLED)})")


def load(model: str | os.PathLike | onnx.ModelProto, *,
         input_shapes: Mapping[str, Sequence[int]] | None = None,
         constants: Mapping[str, np.ndarray] | None = None,
         batch: int | None = None, random_weights: int | None = None) -> Network:
    """Import a model (path, bundled name or ModelProto) into a verified Network.

    `input_shapes` binds symbolic input dims; `constants` binds graph inputs as
    compile-time constants; `batch` re-batches a bundled-style model;
    `random_weights` replaces float weights with ones drawn from that seed.
    """
    proto, source = read_model(model)
    if random_weights is not None:
        proto = zoo.randomize_weights(proto, random_weights)
    if batch is not None:
        if batch < 1:
            raise GlowError(f"batch must be at least 1, got {batch}")
        proto = zoo.rebatch(proto, batch)
    module = import_model(proto, input_shapes=input_shapes, constants=constants, source=source)
    return Network(module, source)


def compile(network: Network, target: str = "interpreter", *,  # noqa: A001
            quantization: QuantizationConfig | None = None, fallback: str | None = "cpu",
            **options: Any) -> CompiledNetwork:
    """Compile a network for `target` (a backend name, see `glowsdk backends`), quantized when given a
    `glowsdk.quantization.QuantizationConfig`. Nodes the target cannot run go to `fallback` (a backend
    name; the interpreter takes what even the fallback refuses); `fallback=None` refuses them instead."""
    backend = get_backend(target)
    compiled = compile_function(network.function, backend, CompileOptions(extra=dict(options)),
                                quantization=quantization, fallbacks=fallback_backends(fallback))
    return CompiledNetwork(network, target, compiled)


def fallback_backends(fallback: str | None) -> list[Backend]:
    """The backends a `fallback` name stands for: it, then the interpreter as the last resort."""
    if fallback is None or fallback == "none":
        return []
    names = [fallback] if fallback == "interpreter" else [fallback, "interpreter"]
    return [get_backend(name) for name in names]


class Session(CompiledNetwork):
    """load + compile in one step, onnxruntime-style: `Session(path, target=...).run(feeds)`."""

    def __init__(self, model: str | os.PathLike | onnx.ModelProto, target: str = "interpreter",
                 **load_options: Any) -> None:
        network = load(model, **load_options)
        compiled = compile(network, target)
        super().__init__(network, target, compiled.compiled)
