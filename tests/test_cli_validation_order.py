"""`compile` and `serve-bench` check their destinations, --config and the targets' flags before loading and
calibrating the model (the npu target calibrates on random inputs when given no profile): a typo costs one line,
not a calibration."""
from __future__ import annotations

import pytest

import glowsdk.quantization
from glowsdk.cli import options
from glowsdk.cli.main import main

MODEL = "resnet50"
"""A bundled model whose calibration would take a while: none of these commands may reach it."""


@pytest.fixture()
def calls(monkeypatch):
    """Record, and refuse, any model loading or calibration."""
    seen: list[str] = []

    def refuse(what):
        def called(*args, **kwargs):
            seen.append(what)
            raise glowsdk.errors.GlowError(f"{what} was called")
        return called

    monkeypatch.setattr(options, "load_network", refuse("load_network"))
    monkeypatch.setattr(glowsdk.quantization, "collect_profile", refuse("collect_profile"))
    monkeypatch.setattr(glowsdk.quantization, "calibration_random", refuse("calibration_random"))
    return seen


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


@pytest.mark.parametrize("argv, message", [
    (["-o", "/nonexistent/x.npub"], "glowsdk: error: -o /nonexistent/x.npub: no such folder /nonexistent"),
    (["--config", "nosuchpreset"], "glowsdk: error: unknown architecture preset 'nosuchpreset' (presets: "),
    (["--config", "/nonexistent/arch.toml"], "glowsdk: error: "),
    (["--dump-llvm", "/nonexistent/m.ll"], "glowsdk: error: --dump-llvm /nonexistent/m.ll: no such folder"),
    (["-o", "/nonexistent/x.npub", "--config", "nosuchpreset"], "glowsdk: error: -o /nonexistent/x.npub"),
])
def test_compile_fails_before_loading_or_calibrating(calls, capsys, argv, message):
    assert main(["compile", MODEL, "--target", "npu", *argv]) == 2
    assert one_line_error(capsys).startswith(message)
    assert calls == []


def test_compile_with_good_options_does_reach_the_model(calls, capsys, tmp_path):
    """The control: with every option right, the first thing refused is loading the model."""
    assert main(["compile", MODEL, "--target", "npu", "--config", "edge", "-o", str(tmp_path / "x.npub")]) == 2
    assert one_line_error(capsys) == "glowsdk: error: load_network was called"
    assert calls == ["load_network"]


def test_serve_bench_checks_the_config_before_calibrating(calls, capsys):
    assert main(["serve-bench", MODEL, "--devices", "npu:2,cpu:1", "--config", "nosuchpreset"]) == 2
    assert one_line_error(capsys).startswith("glowsdk: error: unknown architecture preset 'nosuchpreset'")
    assert calls == []


@pytest.mark.parametrize("command, argv, message", [
    ("compile", ["--target", "npu", "--threads", "2"], "glowsdk: error: --threads is a flag of target cpu, not npu"),
    ("run", ["--target", "interpreter", "--threads", "2"],
     "glowsdk: error: --threads is a flag of target cpu, not interpreter"),
    ("compile", ["--target", "cpu", "--config", "edge"], "glowsdk: error: --config is a flag of target npu, not cpu"),
])
def test_a_flag_of_another_target_fails_before_loading(calls, capsys, command, argv, message):
    # the backends declare these flags (Backend.flags); the CLI passes them to the target that has them only
    assert main([command, MODEL, *argv]) == 2
    assert one_line_error(capsys) == message
    assert calls == []


def test_compile_help_names_each_backend_flags_target(capsys):
    with pytest.raises(SystemExit):
        main(["compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for line in ("--dump-llvm FILE cpu target: write the generated LLVM module to FILE",
                 "--threads N cpu target: run the heavy kernels", "--config PRESET|FILE npu target: the architecture"):
        assert line in text
