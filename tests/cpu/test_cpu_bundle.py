"""AOT bundles: `glowsdk compile --bundle` output, linked with the vendor guide's C example by the
system C compiler and run without glowsdk, must compute what the interpreter computes."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from mlp_util import mlp

import glowsdk
from glowsdk.backends.cpu.bundle import FILES
from glowsdk.cli.main import main

EXAMPLE = Path(__file__).resolve().parents[2] / "vendor_guide" / "cpu_bundle_example" / "main.c"
CC = shutil.which("cc") or shutil.which("gcc")
TOL = 1e-4
"""Relative to the largest output: the compiled kernels sum in another order than numpy."""

needs_cc = pytest.mark.skipif(CC is None, reason="no system C compiler (cc or gcc)")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(tmp_path / "cache"))


def linked_objects(bundle: Path) -> list[str]:
    """The object files the header's link line names, in `bundle`."""
    line = next(line for line in (bundle / "bundle.h").read_text().splitlines() if "Link every one of them:" in line)
    return [str(bundle / word.removeprefix("DIR/")) for word in line.split() if word.endswith(".o")]


def build_and_run(bundle: Path, network: glowsdk.Network, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compile the C example against `bundle` with the objects its header names, run it on `feeds`;
    the outputs it wrote."""
    program = bundle / "run"
    subprocess.run([CC, "-O2", "-Wall", "-Werror", "-I", str(bundle), str(EXAMPLE), *linked_objects(bundle),
                    "-lm", "-o", str(program)], check=True, capture_output=True, text=True)
    args = [str(bundle / "bundle.weights")]
    for i, info in enumerate(network.inputs):  # the header's table order: inputs, then outputs
        path = bundle / f"in{i}.bin"
        np.ascontiguousarray(feeds[info.name], dtype=info.type.dtype).tofile(path)
        args.append(str(path))
    args += [str(bundle / f"out{i}.bin") for i in range(len(network.outputs))]
    run = subprocess.run([str(program), *args], check=True, capture_output=True, text=True)
    assert all(info.name in run.stdout for info in network.outputs)
    return {info.name: np.fromfile(bundle / f"out{i}.bin", dtype=info.type.dtype).reshape(info.shape)
            for i, info in enumerate(network.outputs)}


def check_against_interpreter(bundle: Path, network: glowsdk.Network) -> None:
    feeds = network.random_inputs(3)
    got = build_and_run(bundle, network, feeds)
    want = glowsdk.compile(network, "interpreter").run(feeds)
    for name in want:
        scale = float(np.abs(want[name]).max())
        assert np.abs(got[name] - want[name]).max() <= TOL * scale, name


@needs_cc
def test_mlp_bundle_runs_standalone(tmp_path, capsys):
    model = mlp(input_name='in/"put"\\?', output_name="out")  # a name the header must escape
    onnx.save(model, tmp_path / "mlp.onnx")
    bundle = tmp_path / "bundle"
    assert main(["compile", str(tmp_path / "mlp.onnx"), "--target", "cpu", "--bundle", str(bundle)]) == 0
    out = capsys.readouterr().out
    assert all(f"wrote {bundle / name}" in out for name in FILES)
    check_against_interpreter(bundle, glowsdk.load(model))
    again = tmp_path / "from_cache"  # the second compile loads the image from the cache: the same bundle
    assert main(["compile", str(tmp_path / "mlp.onnx"), "--target", "cpu", "--bundle", str(again)]) == 0
    assert "from the compile cache" in capsys.readouterr().out
    assert all((again / name).read_bytes() == (bundle / name).read_bytes() for name in FILES)


@needs_cc
def test_bundle_of_a_module_in_parts_links_every_object(tmp_path, capsys):
    """A module compiled in 3 parts ships 3 objects that call each other through hidden symbols; a
    smaller bundle written over it removes the parts it no longer has."""
    onnx.save(mlp(), tmp_path / "mlp.onnx")
    bundle = tmp_path / "bundle"
    compile_args = ["compile", str(tmp_path / "mlp.onnx"), "--target", "cpu", "--no-cache", "--bundle", str(bundle)]
    assert main([*compile_args, "--backend-opt", "compile_threads=3"]) == 0
    assert linked_objects(bundle) == [str(bundle / name) for name in ("bundle.o", "bundle.1.o", "bundle.2.o")]
    assert f"wrote {bundle / 'bundle.2.o'}" in capsys.readouterr().out
    check_against_interpreter(bundle, glowsdk.load(mlp()))
    assert main([*compile_args, "--backend-opt", "compile_threads=1"]) == 0
    assert linked_objects(bundle) == [str(bundle / "bundle.o")]
    assert sorted(p.name for p in bundle.glob("*.o")) == ["bundle.o"]


@needs_cc
def test_squeezenet_bundle_runs_standalone(tmp_path):
    bundle = tmp_path / "bundle"
    assert main(["compile", "squeezenet", "--random-weights", "0", "--target", "cpu", "--bundle", str(bundle)]) == 0
    check_against_interpreter(bundle, glowsdk.load("squeezenet", random_weights=0))


def test_header_states_the_layout_and_every_export(tmp_path):
    network = glowsdk.load(mlp())
    compiled = glowsdk.compile(network, "cpu").compiled
    assert main(["compile", "--target", "cpu", "--bundle", str(tmp_path), _saved(tmp_path)]) == 0
    header = (tmp_path / "bundle.h").read_text()
    image = compiled.image
    assert f"#define GLOWSDK_BUNDLE_CONSTANT_BYTES {image.constants.size}u" in header
    assert f"#define GLOWSDK_BUNDLE_PLACEHOLDER_BYTES {image.placeholder_bytes}u" in header
    assert "int32_t glowsdk_main(void *constants, void *activations, void *placeholders);" in header
    assert (tmp_path / "bundle.weights").read_bytes() == bytes(image.constants)
    offsets = {b.name: b.offset for b in image.bindings}
    assert f'{{"x", "float32", 4, 1, 2, {{2, 16}}, {offsets["x"]}u, 128u' in header


def _saved(folder: Path) -> str:
    path = folder / "mlp.onnx"
    onnx.save(mlp(), path)
    return str(path)


def test_bundle_needs_a_target_that_writes_bundles(tmp_path, capsys):
    assert main(["compile", _saved(tmp_path), "--target", "interpreter", "--bundle", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "--bundle: this target writes no bundles" in err and len(err.strip().splitlines()) == 1
