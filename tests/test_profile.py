"""Profiling for quantization (paper 4.2): instrumentation, statistics, the profile file, calibration inputs, CLI.

Ranges are checked against onnxruntime on the same inputs: the small test model
makes its intermediate ONNX values graph outputs too, so onnxruntime returns
them, and each is the value a Save in the lowered graph writes, whose name
keys the profile.
"""
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import glowsdk
from glowsdk.backends import get_backend
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph.nodes.core import Save
from glowsdk.quantization import (PREFIX, Histogram, ValueProfile, calibration_from_dir, calibration_random,
                                  collect_profile, format_profile, instrument_for_profiling, load_profile,
                                  profiled_values, save_profile)

INTERMEDIATES = ["conv", "relu", "pool", "flat", "gemm", "y"]


def small_model() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Sigmoid, every intermediate also a graph output."""
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(4).astype(np.float32),
             "gw": rng.standard_normal((5, 36)).astype(np.float32),
             "gb": rng.standard_normal(5).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["relu"]),
             helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["pool"], ["flat"]),
             helper.make_node("Gemm", ["flat", "gw", "gb"], ["gemm"], transB=1),
             helper.make_node("Sigmoid", ["gemm"], ["y"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in INTERMEDIATES]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
                              outputs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def two_input_model() -> onnx.ModelProto:
    """relu(in/a + b): an input name that is not a file name."""
    nodes = [helper.make_node("Add", ["in/a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in ("in/a", "b")]
    graph = helper.make_graph(nodes, "two", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def saved_values(network) -> dict[str, str]:
    """Output placeholder name -> the name of the lowered value its Save writes."""
    found = {}

    def on_stage(stage, function):
        if stage == "lowered":
            found.update({n.output.node.name: n.input.name for n in function.nodes if isinstance(n, Save)})

    compile_function(network.function, get_backend("interpreter"), on_stage=on_stage)
    return found


def samples(n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": (rng.standard_normal((1, 2, 6, 6)) * (i + 1)).astype(np.float32)} for i in range(n)]


# -- the profile against onnxruntime -------------------------------------------------------------

def test_ranges_match_onnxruntime_for_values_in_both():
    ort = pytest.importorskip("onnxruntime")
    model = small_model()
    network = glowsdk.load(model)
    feeds = samples(4)
    profile = collect_profile(network, feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runs = [dict(zip(INTERMEDIATES, session.run(INTERMEDIATES, f))) for f in feeds]
    mapping = saved_values(network)
    for onnx_name in INTERMEDIATES:
        got = profile[mapping[onnx_name]]
        want = np.stack([r[onnx_name] for r in runs])
        assert got.count == want.size and got.histogram.total == want.size
        np.testing.assert_allclose([got.min, got.max], [want.min(), want.max()], rtol=1e-5, atol=1e-6)
        assert got.shape == want.shape[1:] and got.elem == "float32"
    data = np.stack([f["x"] for f in feeds])
    assert (profile["x"].node, profile["x"].min, profile["x"].max) == ("Placeholder", data.min(), data.max())
    assert profile.calibration == {"count": 4, "how": "inputs given by the caller"}
    assert profile.model == {"source": "small", "target": "interpreter"}


def test_every_float_compute_value_is_profiled_and_counts_add_up():
    network = glowsdk.load(small_model())
    profile = collect_profile(network, samples(3))
    lowered = {}
    compile_function(network.function, get_backend("interpreter"),
                     on_stage=lambda stage, fn: stage == "lowered" and lowered.update(
                         {v.name: v.type for v in profiled_values(fn)}))
    assert set(profile.values) == set(lowered) | {"x"}
    for name, value in profile.values.items():
        size = int(np.prod(value.shape))
        assert value.count == 3 * size
        assert value.histogram.total == value.count - value.nan - value.pos_inf - value.neg_inf
        if name != "x":
            assert list(value.shape) == list(lowered[name].shape)


def test_instrumentation_saves_each_value_and_leaves_the_outputs_alone():
    network = glowsdk.load(small_model())
    backend = get_backend("interpreter")
    seen = {}

    def instrument(function):
        seen.update(instrument_for_profiling(function))
        seen["function"] = function

    plain = compile_function(network.function, backend)
    instrumented = compile_function(network.function, backend, instrument=instrument)
    function = seen.pop("function")
    saves = {n.output.node.name: n.input for n in function.nodes if isinstance(n, Save)}
    for output, value in seen.items():
        assert output == PREFIX + value.name and saves[output] == value
        assert value.type.elem.is_float and value.node.kind not in ("Constant", "Placeholder", "Save")
    assert {o.name for o in instrumented.outputs} == set(INTERMEDIATES) | set(seen)
    feeds = samples(1)[0]
    want, got = plain.execute(feeds), instrumented.execute(feeds)
    for name in INTERMEDIATES:
        np.testing.assert_array_equal(got[name], want[name])
    for output, value in seen.items():  # a profiled value is what the plain graph computes where it is saved
        for name, saved in saved_values(network).items():
            if saved == value.name:
                np.testing.assert_array_equal(got[output], want[name])


def test_profiles_are_deterministic():
    network = glowsdk.load("squeezenet", random_weights=0)
    first = collect_profile(network, calibration_random(network, 1, seed=5))
    second = collect_profile(network, calibration_random(network, 1, seed=5))
    assert format_profile(first) == format_profile(second)
    assert first.calibration == {"count": 1, "how": "random inputs, seed 5"}


def test_nan_and_inf_are_counted_apart():
    value = ValueProfile("v", "Div", "float32", (6,))
    value.add(np.array([1.0, np.nan, np.inf, -np.inf, -2.0, np.inf], np.float32))
    assert (value.count, value.nan, value.pos_inf, value.neg_inf) == (6, 1, 2, 1)
    assert (value.min, value.max, value.histogram.total) == (-2.0, 1.0, 2)
    value.add(np.full(6, np.nan, np.float32))
    assert (value.count, value.nan, value.histogram.total) == (12, 7, 2)


# -- the histogram ------------------------------------------------------------------------------

def direct_counts(hist: Histogram, data: np.ndarray) -> np.ndarray:
    """The histogram of all of `data` on `hist`'s final grid, computed in one go."""
    start = round(hist.edge / hist.width)
    return np.bincount(np.floor(data / hist.width).astype(np.int64) - start, minlength=hist.bins)


def test_range_growth_rebins_exactly():
    rng = np.random.default_rng(0)
    hist = Histogram(64)
    chunks = [np.full(5, 3.0), rng.normal(3, 0.01, 100), rng.standard_normal(100), rng.normal(-400, 100, 50),
              np.array([1e30, -1e-30]), np.array([0.0])]
    data = np.empty(0)
    for chunk in chunks:
        hist.add(chunk)
        data = np.concatenate([data, chunk])
        counts = hist.grid_counts()
        assert counts.sum() == data.size
        assert (hist.low, hist.high) == (data.min(), data.max())
        np.testing.assert_array_equal(counts, direct_counts(hist, data))
        used = np.nonzero(counts)[0]
        if hist.low != hist.high:
            assert hist.edge <= hist.low and hist.high < hist.edge + hist.bins * hist.width
            assert used[-1] - used[0] + 1 > hist.bins // 2 - 1  # the data spans about half the bins at least


def test_a_constant_value_is_one_bin():
    hist = Histogram()
    hist.add(np.zeros(10))
    counts = hist.grid_counts()
    assert counts[0] == 10 and counts.sum() == 10 and hist.edge == 0.0
    hist.add(np.array([1.0]))
    counts = hist.grid_counts()  # [0, 1] needs width 2**-10: at 2**-11, 1.0 would fall in bin 2048
    assert (counts[0], counts[1024], hist.total, hist.width) == (10, 1, 11, 2.0 ** -10)


# -- the profile file ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved_profile(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "p.json"
    profile = collect_profile(glowsdk.load(small_model()), samples(2))
    save_profile(profile, path)
    return profile, path


def test_json_round_trip(saved_profile, tmp_path):
    profile, path = saved_profile
    text = path.read_text()
    assert text == format_profile(profile)
    data = json.loads(text)
    assert (data["format"], data["version"], data["histogram_bins"]) == ("glowsdk-profile", 2, 2048)
    assert data["glowsdk_version"] == glowsdk.__version__
    loaded = load_profile(path)
    assert format_profile(loaded) == text
    for name, value in profile.values.items():
        twin = loaded[name]
        assert (twin.min, twin.max, twin.count, twin.shape) == (value.min, value.max, value.count, value.shape)
        np.testing.assert_array_equal(twin.histogram.grid_counts(), value.histogram.grid_counts())
    save_profile(loaded, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["again.json"]  # no temporary left behind


def edited(path, tmp_path, edit) -> str:
    data = json.loads(path.read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    return str(bad)


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.update(version=3), "bad.json: version: profile format version 3; this glowsdk reads versions 1, 2"),
    (lambda d: d.update(format="other"), "bad.json: format: expected 'glowsdk-profile', got \"other\""),
    (lambda d: d.pop("calibration"), "bad.json: missing key 'calibration'"),
    (lambda d: d["values"][1].pop("max"), "bad.json: values[1] ('{name}'): missing key 'max'"),
    (lambda d: d["values"][1].update(min="low"), "bad.json: values[1] ('{name}').min: expected a number or null"),
    (lambda d: d["values"][1]["histogram"]["counts"].pop(),
     "bad.json: values[1] ('{name}').histogram.counts: expected an array of histogram_bins = 2048 counts, got 2047"),
    (lambda d: d["values"][1].update(count=d["values"][1]["count"] + 1),
     "bad.json: values[1] ('{name}').histogram.counts: add up to"),
    (lambda d: d["values"][1]["histogram"].update(width=0.3), "is not a positive power of two"),
    (lambda d: d["values"][1].update(min=d["values"][1]["max"] + 1), "do not form a range"),
    (lambda d: d["values"].append(d["values"][0]), "bad.json: values[{last}]: value 'x' appears twice"),
])
def test_bad_profile_files_give_one_precise_line(saved_profile, tmp_path, edit, message):
    profile, path = saved_profile
    names = list(profile.values)
    with pytest.raises(GlowError) as err:
        load_profile(edited(path, tmp_path, edit))
    text = str(err.value)
    assert "\n" not in text and message.format(name=names[1], last=len(names)) in text


def test_unreadable_profile_files(tmp_path):
    with pytest.raises(GlowError, match=r"nothing\.json: no such profile file"):
        load_profile(tmp_path / "nothing.json")
    (tmp_path / "trunc.json").write_text('{"format": "glowsdk-profile", "values": [')
    with pytest.raises(GlowError, match=r"trunc\.json: not valid JSON \(line 1 column"):
        load_profile(tmp_path / "trunc.json")
    (tmp_path / "nan.json").write_text('{"format": NaN}')
    with pytest.raises(GlowError, match=r"nan\.json: not valid JSON \(NaN is not JSON\)"):
        load_profile(tmp_path / "nan.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(GlowError, match=r"list\.json: expected a JSON object, got an array"):
        load_profile(tmp_path / "list.json")


def test_save_into_a_missing_folder_fails_cleanly(saved_profile, tmp_path):
    with pytest.raises(GlowError, match=r"cannot write the profile"):
        save_profile(saved_profile[0], tmp_path / "no" / "p.json")


# -- calibration inputs -------------------------------------------------------------------------

def test_calibration_folder_of_npy_files_gives_the_profile_of_those_inputs(tmp_path):
    network = glowsdk.load(small_model())
    feeds = samples(3)
    for i, feed in enumerate(feeds):
        np.save(tmp_path / f"s{i}.npy", feed["x"].astype(np.float64))  # float64 is accepted for float32
    calibration = calibration_from_dir(tmp_path, network)
    assert len(calibration) == 3 and calibration.describe() == {"count": 3, "how": f"folder {tmp_path}"}
    from_dir = collect_profile(network, calibration)
    from_list = collect_profile(network, feeds)
    from_dir.calibration = from_list.calibration
    assert format_profile(from_dir) == format_profile(from_list)


def test_calibration_folders_per_sample(tmp_path):
    network = glowsdk.load(two_input_model())
    rng = np.random.default_rng(1)
    for i in range(2):
        (tmp_path / f"{i}").mkdir()
        np.save(tmp_path / f"{i}" / "in_a.npy", rng.standard_normal((2, 3)).astype(np.float32))
        np.save(tmp_path / f"{i}" / "b.npy", rng.standard_normal((2, 3)).astype(np.float32))
    profile = collect_profile(network, calibration_from_dir(tmp_path, network))
    a = np.stack([np.load(tmp_path / f"{i}" / "in_a.npy") for i in range(2)])
    assert (profile["in/a"].min, profile["in/a"].max, profile["in/a"].count) == (a.min(), a.max(), 12)
    assert profile.calibration["count"] == 2


def bad_layouts():
    def flat(path):
        np.save(path / "s0.npy", np.zeros((1, 2, 6, 6), np.float32))
        return path

    def wrong_shape(path):
        np.save(flat(path) / "s1.npy", np.zeros((2, 6, 6), np.float32))
        return "s1.npy: input 'x': expected shape [1, 2, 6, 6], got [2, 6, 6]"

    def wrong_kind(path):
        np.save(flat(path) / "s1.npy", np.zeros((1, 2, 6, 6), np.bool_))
        return "s1.npy: input 'x': expected float32, got bool"

    def text_file(path):
        (flat(path) / "notes.txt").write_text("hi")
        return "notes.txt: not a .npy file"

    def fake_npy(path):
        (flat(path) / "s1.npy").write_text("hello")
        return "s1.npy: not a .npy file (no .npy header)"

    def mixed(path):
        (flat(path) / "sub").mkdir()
        return "s0.npy: a file among per-sample folders"

    def missing_input(path):
        (path / "0").mkdir()
        np.save(path / "0" / "y.npy", np.zeros(3, np.float32))
        return "0/y.npy: the model has no input named like this (expected x.npy)"

    def empty(path):
        return "the calibration folder is empty"

    return [wrong_shape, wrong_kind, text_file, fake_npy, mixed, missing_input, empty]


@pytest.mark.parametrize("layout", bad_layouts(), ids=lambda f: f.__name__)
def test_bad_calibration_folders(tmp_path, layout):
    message = layout(tmp_path)
    with pytest.raises(GlowError) as err:
        calibration_from_dir(tmp_path, glowsdk.load(small_model()))
    assert "\n" not in str(err.value) and message in str(err.value)


def test_calibration_folder_problems_of_multi_input_models(tmp_path):
    network = glowsdk.load(two_input_model())
    np.save(tmp_path / "s0.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(GlowError, match=r"holds one file per sample, but the model has 2 inputs \(in/a, b\)"):
        calibration_from_dir(tmp_path, network)
    (tmp_path / "s0.npy").unlink()
    (tmp_path / "0").mkdir()
    np.save(tmp_path / "0" / "in_a.npy", np.zeros((2, 3), np.float32))
    with pytest.raises(GlowError, match=r"0/b\.npy: missing \(input 'b'\)"):
        calibration_from_dir(tmp_path, network)
    with pytest.raises(GlowError, match=r"nowhere: no such folder"):
        calibration_from_dir(tmp_path / "nowhere", network)


# -- the command line ---------------------------------------------------------------------------

def glowsdk_cli(*args):
    return subprocess.run([sys.executable, "-m", "glowsdk", *args], capture_output=True, text=True, timeout=600)


def test_cli_profile_squeezenet_random(tmp_path):
    out = tmp_path / "profile.json"
    proc = glowsdk_cli("profile", "squeezenet", "--random-weights", "0", "--calibration-random", "4", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    profile = load_profile(out)
    assert profile.calibration == {"count": 4, "how": "random inputs, seed 0"}
    assert profile.model == {"source": "squeezenet", "target": "interpreter", "random_weights": 0}
    assert f"profiled {len(profile)} values of squeezenet" in proc.stdout
    widest = profile.widest(10)
    assert len(widest) == 10 and all(v.name in proc.stdout for v in widest)
    assert "profiling" not in proc.stderr  # progress is for terminals: a pipe gets none
    assert all(v.count == 4 * int(np.prod(v.shape)) for v in profile.values.values())


def test_cli_profile_squeezenet_from_a_folder(tmp_path):
    rng = np.random.default_rng(2)
    folder = tmp_path / "calib"
    folder.mkdir()
    images = [rng.uniform(0, 1, (1, 3, 224, 224)).astype(np.float32) for _ in range(2)]
    for i, image in enumerate(images):
        np.save(folder / f"img{i}.npy", image)
    out = tmp_path / "profile.json"
    proc = glowsdk_cli("profile", "squeezenet", "--random-weights", "0", "--calibration", str(folder), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    profile = load_profile(out)
    assert profile.calibration == {"count": 2, "how": f"folder {folder}"}
    stacked = np.stack(images)
    assert (profile["data_0"].min, profile["data_0"].max) == (stacked.min(), stacked.max())


@pytest.mark.parametrize("args, message", [
    (["--calibration-random", "0"], "needs at least 1 sample"),
    (["--calibration", "nowhere"], "nowhere: no such folder"),
    (["--calibration-random", "1", "-o", "no/such/dir/p.json"], "no such folder"),
])
def test_cli_profile_bad_input(tmp_path, args, message):
    if "-o" not in args:
        args = args + ["-o", str(tmp_path / "p.json")]
    proc = glowsdk_cli("profile", "squeezenet", *args)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr
