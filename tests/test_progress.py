"""Progress: every step of the main job shows on a terminal (checked under a pseudo-terminal), none off one."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios
import time

import pytest

from glowsdk import progress
from npu_nets import NetBuilder


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _under_pty(args: list[str], cwd) -> str:
    """Everything `python -m glowsdk ARGS` writes to a 100x30 pseudo-terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "glowsdk", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd, env=env, close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=600) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


def test_main_job_shows_every_step_on_a_terminal(tmp_path):
    builder = NetBuilder((1, 3, 16, 16))
    out = builder.conv("x", 3, 8, relu=False)
    (tmp_path / "net.onnx").write_bytes(builder.model(out).SerializeToString())
    compiled = _under_pty(["compile", "net.onnx", "--target", "npu", "--fallback", "none", "-o", "net.npub"], tmp_path)
    # each step a bar: the model's loading, the random calibration (its own interpreter compile), the npu compile
    for step in ("loading, net.onnx (", "calibrating: ", "compiling for interpreter", "compiling for npu"):
        assert step in compiled, step
    assert "wrote net.npub" in compiled
    simulated = _under_pty(["simulate", "net.npub"], tmp_path)
    for step in ("reading, net.npub (", "simulating: "):
        assert step in simulated, step


def test_no_progress_off_a_terminal(capsys):
    with progress.Progress("quiet", 3) as bar:
        bar(1, label="one")
        bar.step("two")
    assert list(progress.progress(range(3), "quiet too")) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_an_open_bar_is_redrawn_while_its_step_reports_nothing(monkeypatch):
    """The ticker keeps the elapsed time moving through one long call (an LLVM compile, say)."""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.01)
    with progress.Progress("long step", None, "") as bar:
        bar.label("one call")
        drawn = len(terminal.getvalue())
        for _ in range(500):  # no update is made: only the ticker can write
            if len(terminal.getvalue()) > drawn:
                break
            time.sleep(0.01)
        assert len(terminal.getvalue()) > drawn
    assert "long step, one call (" in terminal.getvalue()


@pytest.mark.parametrize("sized", [False, True])
def test_a_bar_counts_and_names_its_step(monkeypatch, sized):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    items = ["a", "b", "c", "d"]
    for _ in progress.progress(items if sized else iter(items), "items", unit="item", label=str.upper):
        pass
    text = terminal.getvalue()
    assert "items: 0" + ("/4" if sized else " item") in text and ", D" in text
