"""glowsdk's int8 quantization against onnxruntime's static quantization, on the bundled deep nets.

    python bench/quantization_vs_onnxruntime.py [--models resnet50,squeezenet,vgg19,inception_v1]
                                                [--calibration 32] [--eval 32] [--weight-seed 0]
                                                [--json out.json]

For each model, with seeded random weights (`zoo.randomize_weights`, seed 0 unless
`--weight-seed` says otherwise: top-1 agreement on 32 inputs moves by a few rows
with the draw, so a claim is checked on a second seed and more inputs):
the float outputs come from onnxruntime on the evaluation inputs; onnxruntime
quantizes the model statically (QDQ, int8 activations and weights, MinMax
calibration), per tensor and per channel; glowsdk quantizes it from a profile
(asymmetric schema, min-max calibration), per tensor and per channel. Every
quantized run is scored against the same onnxruntime float outputs
(`glowsdk.quantization.accuracy`). Calibration and evaluation inputs are
seeded standard-normal samples drawn as `glowsdk profile --calibration-random`
draws them, from different seeds.

Before quantizing, onnxruntime's model is prepared as its documentation asks:
initializers are taken out of the graph inputs (the bundled models are IR
version 3, where every weight is also an input, which stops onnxruntime from
folding batch norms into convolutions); the opset 9 models are converted to
opset 13 (`onnx.version_converter`), which per-channel DequantizeLinear needs
(its `axis`); and `quant_pre_process` runs shape inference and graph
optimisation. The float outputs come from the model before conversion.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, version_converter
from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

import glowsdk
from glowsdk.compiler.backend import TensorInfo
from glowsdk.errors import GlowError
from glowsdk.graph.types import ElemKind, Type
from glowsdk.quantization import collect_profile
from glowsdk.quantization.accuracy import SUMMARY_HEADERS, AccuracyReport, compare_outputs
from glowsdk.table import format_table
from glowsdk.zoo import BUNDLED, bundled_path, is_bundled, random_inputs, randomize_weights

MODELS: tuple[str, ...] = ("resnet50", "squeezenet", "vgg19", "inception_v1")
WEIGHT_SEED = 0
CALIBRATION_SEED = 0  # the seed `calibration_random` defaults to
EVALUATION_SEED = 1
TARGET = "interpreter"
ORT_OPSET = 13  # the first opset whose DequantizeLinear takes an axis, as per-channel weights need

ORT_METHODS = {"onnxruntime static": False, "onnxruntime static per-channel": True}
# method -> QuantizationConfig options beyond the shared ones (per-tensor is the default)
GLOWSDK_METHODS: dict[str, dict] = {
    "glowsdk": {}, "glowsdk per-channel": {"per_channel": True},
    "glowsdk percentile": {"calibration": "percentile"},
    "glowsdk percentile per-channel": {"calibration": "percentile", "per_channel": True},
}

Sample = dict[str, np.ndarray]


class Progress:
    """One line per stage on stderr, and each stage's seconds for the JSON file."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def stage(self, what: str) -> Iterator[None]:
        sys.stderr.write(f"{self.model}: {what} ...")
        sys.stderr.flush()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[what] = time.perf_counter() - start
            sys.stderr.write(f" {self.seconds[what]:.1f} s\n")


@dataclass
class Row:
    """One quantizer's figures on one model, or why there are none."""

    method: str
    report: AccuracyReport | None = None
    unavailable: str | None = None

    def to_json(self) -> dict:
        return {"method": self.method, "report": self.report.to_json() if self.report else None,
                "unavailable": self.unavailable}


@dataclass
class ModelResult:
    name: str
    rows: list[Row] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"name": self.name, "rows": [r.to_json() for r in self.rows], "seconds": self.seconds,
                "total_seconds": sum(self.seconds.values())}

    def table(self) -> str:
        """One row per method (and output, when there are several); reasons for missing figures below."""
        rows, missing = [], defaultdict(list)
        for row in self.rows:
            if row.report is None:
                rows.append([row.method] + ["n/a"] * len(SUMMARY_HEADERS))
                missing[row.unavailable].append(row.method)
                continue
            several = len(row.report.outputs) > 1
            for output in row.report.outputs:
                rows.append([f"{row.method} [{output.name}]" if several else row.method] + output.summary_cells())
        notes = [f"  {', '.join(methods)}: n/a ({why})" for why, methods in missing.items()]
        return "\n".join([format_table(["method", *SUMMARY_HEADERS], rows), *notes])


def model_inputs(model: onnx.ModelProto) -> list[TensorInfo]:
    """The graph inputs that are not initializers, as glowsdk types (symbolic dims taken as 1)."""
    initializers = {t.name for t in model.graph.initializer}
    infos = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in tensor.shape.dim)
        elem = ElemKind.from_dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        infos.append(TensorInfo(value.name, Type(elem, shape)))
    return infos


def make_samples(inputs: Sequence[TensorInfo], count: int, seed: int) -> list[Sample]:
    """`count` seeded random samples, the ones `calibration_random(network, count, seed)` yields."""
    return [random_inputs(inputs, int(s)) for s in np.random.SeedSequence(seed).generate_state(count)]


def without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` with its initializers no longer listed as graph inputs (IR version 4 and up allow it).

    onnxruntime treats an initializer that is also an input as overridable, so
    its optimiser may not fold it (a batch norm into the convolution before it).
    """
    result = onnx.ModelProto()
    result.CopyFrom(model)
    initializers = {t.name for t in result.graph.initializer}
    inputs = [v for v in result.graph.input if v.name not in initializers]
    del result.graph.input[:]
    result.graph.input.extend(inputs)
    result.ir_version = max(result.ir_version, 4)
    return result


class _Samples(CalibrationDataReader):
    """The calibration samples, as onnxruntime's calibrator reads them."""

    def __init__(self, samples: Sequence[Sample]) -> None:
        self._samples = iter(samples)

    def get_next(self) -> Sample | None:
        return next(self._samples, None)


def run_onnxruntime(model: str | Path, samples: Sequence[Sample]) -> list[Sample]:
    """Each sample's outputs, by name, from onnxruntime's CPU provider."""
    options = ort.SessionOptions()
    options.log_severity_level = 3  # the bundled models carry unused initializers ORT warns about
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, sample))) for sample in samples]


@contextlib.contextmanager
def _quiet_quantizer() -> Iterator[None]:
    """Hide the quantizer's warnings (the opset upgrade, the pre-processing advice) from the progress lines."""
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def onnxruntime_side(model: onnx.ModelProto, calibration: Sequence[Sample], evaluation: Sequence[Sample],
                     workdir: Path, progress: Progress, result: ModelResult) -> list[Sample]:
    """Float outputs and onnxruntime's two static quantizations; returns the float outputs, adds the rows."""
    ort.set_default_logger_severity(3)
    float_path, converted_path, prepared_path = (workdir / f"{stem}.onnx" for stem in ("float", "converted",
                                                                                        "prepared"))
    model = without_initializer_inputs(model)
    onnx.save(model, str(float_path))
    with progress.stage(f"onnxruntime float run ({len(evaluation)} samples)"):
        reference = run_onnxruntime(float_path, evaluation)
    with progress.stage(f"onnx version_converter to opset {ORT_OPSET}"):
        onnx.save(version_converter.convert_version(model, ORT_OPSET), str(converted_path))
    with progress.stage("onnxruntime quant_pre_process"), _quiet_quantizer():
        # the bundled models' shapes are static: ONNX shape inference suffices, so sympy (which the symbolic
        # shape inference needs) is not a test dependency
        quant_pre_process(str(converted_path), str(prepared_path), skip_symbolic_shape=True)
    for method, per_channel in ORT_METHODS.items():
        quantized_path = workdir / f"{method.replace(' ', '_')}.onnx"
        with progress.stage(f"{method}: calibrate and quantize ({len(calibration)} samples)"), _quiet_quantizer():
            quantize_static(str(prepared_path), str(quantized_path), _Samples(calibration),
                            quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                            weight_type=QuantType.QInt8, calibrate_method=CalibrationMethod.MinMax,
                            per_channel=per_channel)
        with progress.stage(f"{method}: run ({len(evaluation)} samples)"):
            outputs = run_onnxruntime(quantized_path, evaluation)
        result.rows.append(Row(method, compare_outputs(reference, outputs)))
    return reference


def glowsdk_side(model: onnx.ModelProto, calibration: Sequence[Sample], evaluation: Sequence[Sample],
                 reference: Sequence[Sample], progress: Progress, result: ModelResult) -> None:
    """glowsdk's two quantizations from one profile, scored against onnxruntime's float outputs."""
    try:
        from glowsdk.quantization import QuantizationConfig
    except ImportError as err:
        result.rows.extend(Row(m, unavailable=f"quantizer not available: {err}") for m in GLOWSDK_METHODS)
        return
    try:
        with progress.stage("glowsdk import"):
            network = glowsdk.load(model)
        with progress.stage(f"glowsdk profile ({len(calibration)} samples)"):
            profile = collect_profile(network, calibration)
    except GlowError as err:
        result.rows.extend(Row(m, unavailable=f"glowsdk failed to import or profile: {err}") for m in GLOWSDK_METHODS)
        return
    for method, options in GLOWSDK_METHODS.items():
        try:  # a TypeError here means this glowsdk's quantizer lacks an option the method needs
            with progress.stage(f"{method}: quantize and compile"):
                config = QuantizationConfig(profile=profile, **{"schema": "asymmetric", "calibration": "minmax",
                                                                **options})
                compiled = glowsdk.compile(network, TARGET, quantization=config)
        except TypeError as err:
            result.rows.append(Row(method, unavailable=f"quantizer not available: {err}"))
            continue
        except GlowError as err:
            result.rows.append(Row(method, unavailable=f"glowsdk failed to compile: {err}"))
            continue
        try:
            with progress.stage(f"{method}: run ({len(evaluation)} samples)"):
                outputs = [compiled.run(sample) for sample in evaluation]
        except GlowError as err:
            result.rows.append(Row(method, unavailable=f"glowsdk failed to run: {err}"))
            continue
        result.rows.append(Row(method, compare_outputs(reference, outputs)))


def bench_model(name: str, calibration_count: int, evaluation_count: int,
                weight_seed: int = WEIGHT_SEED) -> ModelResult:
    """Both quantizers' figures on bundled model `name`."""
    progress = Progress(name)
    result = ModelResult(name)
    with progress.stage(f"random weights (seed {weight_seed})"):
        model = randomize_weights(onnx.load(str(bundled_path(name))), weight_seed)
    inputs = model_inputs(model)
    calibration = make_samples(inputs, calibration_count, CALIBRATION_SEED)
    evaluation = make_samples(inputs, evaluation_count, EVALUATION_SEED)
    with tempfile.TemporaryDirectory(prefix=f"glowsdk-bench-{name}-") as workdir:
        reference = onnxruntime_side(model, calibration, evaluation, Path(workdir), progress, result)
    glowsdk_side(model, calibration, evaluation, reference, progress, result)
    result.seconds = progress.seconds
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated bundled model names")
    parser.add_argument("--calibration", type=int, default=32, help="calibration samples")
    parser.add_argument("--eval", type=int, default=32, help="evaluation samples")
    parser.add_argument("--weight-seed", type=int, default=WEIGHT_SEED, help="seed of the random weights")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args(argv)
    if args.calibration < 1 or args.eval < 1:
        parser.error("--calibration and --eval need at least one sample each")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if not is_bundled(n)]
    if unknown:
        parser.error(f"not bundled: {', '.join(unknown)} (bundled: {', '.join(BUNDLED)})")

    start = time.perf_counter()
    results = []
    for name in names:
        result = bench_model(name, args.calibration, args.eval, args.weight_seed)
        results.append(result)
        print(f"\n{result.name} ({args.calibration} calibration, {args.eval} evaluation samples, "
              f"{result.to_json()['total_seconds']:.0f} s)")
        print(result.table(), flush=True)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.0f} s")
    if args.json:
        settings = {"calibration": args.calibration, "evaluation": args.eval, "weight_seed": args.weight_seed,
                    "calibration_seed": CALIBRATION_SEED, "evaluation_seed": EVALUATION_SEED,
                    "target": TARGET, "onnxruntime": ort.__version__, "onnxruntime_opset": ORT_OPSET, "glowsdk": glowsdk.__version__}
        document = {"settings": settings, "models": [r.to_json() for r in results], "total_seconds": total}
        args.json.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
