"""README.md's quick start stays true: its main-job line runs, as written, through the CLI."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from glowsdk.cli.main import main

README = Path(__file__).resolve().parent.parent / "README.md"


def quick_start() -> list[str]:
    block = re.search(r"## Quick start.*?```sh\n(.*?)```", README.read_text(), re.S).group(1)
    return [line.split("#")[0].strip() for line in block.splitlines() if line.split("#")[0].strip()]


def test_quick_start_installs_runs_the_main_job_and_tests():
    install, main_job, tests = quick_start()
    assert install.startswith("pip install -e") and tests.startswith("pytest")
    assert "glowsdk compile" in main_job and "glowsdk simulate" in main_job


def test_the_main_job_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command in quick_start()[1].split("&&"):
        words = shlex.split(command)
        assert words[0] == "glowsdk"
        assert main(words[1:]) == 0, command
    out = capsys.readouterr().out
    assert (tmp_path / "resnet50.npub").stat().st_size > 25_000_000  # int8 weights of resnet50
    assert re.search(r"cycles\s+[\d,]+", out) and "Softmax" in out
