"""`glowsdk train` refuses what cannot train (issue 22): hyper-parameters that are not finite or out of range,
as the arguments are parsed; data holding NaN or infinities, as it is read; and a run whose loss or weights
stop being finite, at the step they do. Each is one line, exit 2, and nothing written."""
from __future__ import annotations

import numpy as np
import pytest

from glowsdk.cli.main import main
from glowsdk.errors import GlowError
from glowsdk.graph.function import Module
from glowsdk.graph.nodes import linalg
from glowsdk.graph.types import ElemKind, Type
from glowsdk.training import DivergedError, SGDConfig, Trainer
from glowsdk.zoo.digits import digits_model_path, load_digits_split

EXAMPLES = 64


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The .npz of 64 digits: four batches of 16."""
    x, y = load_digits_split()[:2]
    path = tmp_path_factory.mktemp("data") / "data.npz"
    np.savez(path, image=x[:EXAMPLES], target=y[:EXAMPLES])
    return path


def _train(data, out, *flags: str) -> int:
    return main(["train", str(digits_model_path()), "--data", str(data), "--batch", "16", "--random-weights", "0",
                 *flags, "-o", str(out)])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err, err
    return err


@pytest.mark.parametrize("flag, value, wanted", [
    ("--lr", "inf", "a finite number > 0"),
    ("--lr", "nan", "a finite number > 0"),
    ("--lr", "1e400", "a finite number > 0"),  # overflows to inf as a float
    ("--lr", "-0.1", "a finite number > 0"),
    ("--lr", "0", "a finite number > 0"),
    ("--momentum", "1", "a finite number in [0, 1)"),
    ("--momentum", "nan", "a finite number in [0, 1)"),
    ("--momentum", "-0.5", "a finite number in [0, 1)"),
    ("--weight-decay", "-1", "a finite number >= 0"),
    ("--weight-decay", "inf", "a finite number >= 0"),
    ("--weight-decay", "nan", "a finite number >= 0"),
    ("--epochs", "0", "a whole number >= 1"),
    ("--batch", "0", "a whole number >= 1"),
])
def test_bad_hyper_parameters_are_refused_before_the_data_is_read(tmp_path, capsys, flag, value, wanted):
    out = tmp_path / "trained.onnx"
    with pytest.raises(SystemExit) as exit_:  # argparse's exit: no data file is needed to get here
        _train(tmp_path / "missing.npz", out, f"{flag}={value}")
    assert exit_.value.code == 2
    assert f"argument {flag}: '{value}' is not {wanted}" in _one_line(capsys)
    assert not out.exists()


@pytest.mark.parametrize("array, bad", [("image", np.nan), ("target", np.inf)])
def test_data_holding_nan_or_inf_is_refused_naming_the_array(tmp_path, capsys, data, array, bad):
    with np.load(data) as archive:
        arrays = {name: archive[name].astype(np.float32) for name in archive.files}
    arrays[array].flat[5] = bad
    poisoned = tmp_path / "poisoned.npz"
    np.savez(poisoned, **arrays)
    out = tmp_path / "trained.onnx"
    assert _train(poisoned, out) == 2
    assert _one_line(capsys) == (f"glowsdk: error: --data {poisoned}: array '{array}' holds 1 NaN or infinite "
                                 f"value(s) of {arrays[array].size}; training needs finite data")
    assert not out.exists()


def test_a_diverging_run_stops_naming_the_step_and_writes_nothing(tmp_path, capsys, data):
    out = tmp_path / "trained.onnx"
    assert _train(data, out, "--lr", "1e30", "--epochs", "2") == 2
    err = _one_line(capsys)
    assert err.startswith("glowsdk: error: training diverged at epoch 1, step ")
    assert err.endswith("; nothing written, try a smaller --lr than 1e+30")
    assert not out.exists()
    out.write_bytes(b"an earlier model")
    assert _train(data, out, "--lr", "1e30") == 2
    assert out.read_bytes() == b"an earlier model"
    assert _train(data, out, "--lr", "0.05") == 0  # the same run with a sane rate writes the model
    assert out.stat().st_size > 100


def test_the_trainer_keeps_its_last_finite_weights():
    """y = x @ w: the first step's loss is finite but its update overflows float32, so the step is refused whole."""
    module = Module()
    fn = module.create_function()
    x = module.create_placeholder("x", Type(ElemKind.FLOAT32, (4, 3)))
    w0 = np.ones((3, 2), np.float32)
    fn.save(fn.add(linalg.MatMul, x.result(), module.create_constant("w", w0).result()), "y")
    trainer = Trainer(fn, "regression", SGDConfig(1e38))
    inputs, target = {"x": np.ones((4, 3), np.float32)}, np.zeros((4, 2), np.float32)
    with pytest.raises(DivergedError, match=r"^training diverged at epoch 1, step 1: weight 'w' became NaN or "
                                            r"infinite in 6 of 6 values \(loss 36\); try a learning rate "
                                            r"smaller than 1e\+38$"):
        trainer.epoch([(inputs, target)])
    np.testing.assert_array_equal(trainer.weights["w"], w0)


@pytest.mark.parametrize("lr, momentum, decay", [(np.inf, 0, 0), (np.nan, 0, 0), (1, np.nan, 0), (1, 0, np.nan),
                                                (1, 0, np.inf)])
def test_sgd_config_refuses_non_finite_numbers(lr, momentum, decay):
    with pytest.raises(GlowError, match="must be a finite number"):
        SGDConfig(lr, momentum, decay)
