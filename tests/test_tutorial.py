"""vendor_guide/tutorial.md, followed literally in a fresh virtual environment, so it cannot rot.

Every fenced block runs in order in one bash script: a block whose info string
names a file (```python file=first_model.py) is written to that file, a bash
block is run as it stands, in an empty folder, with this interpreter first on PATH
as `python`, GLOWSDK_SOURCE pointing at this repository and pip held offline. The
tutorial's venv reuses this interpreter's site-packages (numpy, onnx, llvmlite, pip,
setuptools >= 70.1 from the test extra) through a .pth file, so the test passes the
same way whether pytest runs in the base Python, in a plain virtualenv or in a
--system-site-packages one. (`python -m venv --system-site-packages` from inside a
virtualenv would reach the base Python's packages instead: no numpy, or a setuptools
without bdist_wheel.)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TUTORIAL = REPO / "vendor_guide" / "tutorial.md"
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)


def blocks(text: str) -> list[tuple[str, str | None, str]]:
    """(language, file name or None, body) of every fenced block, in order."""
    found = []
    for language, info, body in FENCE.findall(text):
        named = re.search(r"file=(\S+)", info)
        found.append((language, named.group(1) if named else None, body))
    return found


def script(text: str) -> str:
    """The tutorial as one bash script: files written with quoted here-documents, commands as they are."""
    lines = ["set -euo pipefail"]
    for language, name, body in blocks(text):
        if name is not None:
            assert "TUTORIAL_EOF" not in body
            lines += [f'mkdir -p "$(dirname {name})"', f"cat > {name} <<'TUTORIAL_EOF'", body.rstrip("\n"),
                      "TUTORIAL_EOF"]
        else:
            assert language == "bash", f"a {language} block without file= cannot be run"
            lines.append(body)
    return "\n".join(lines) + "\n"


def test_the_tutorial_has_the_steps_a_vendor_needs() -> None:
    found = blocks(TUTORIAL.read_text())
    names = {name for _, name, _ in found if name}
    assert {"mychip/pyproject.toml", "mychip/mychip_backend/__init__.py", "first_model.py"} <= names
    commands = "\n".join(body for language, name, body in found if language == "bash")
    for step in ("python -m venv", "pip install", "glowsdk backends", "python first_model.py", "glowsdk conformance"):
        assert step in commands, step
    # pip of the venv's own interpreter, never a `pip` found on PATH that may belong to another one
    assert not re.search(r"(^|[;&|]\s*)pip3?\s", commands, re.M), commands


def test_the_tutorial_runs_literally_in_a_fresh_venv(tmp_path: Path) -> None:
    """About 30-40 s: a venv, two editable installs, one model on two targets, a conformance run."""
    work, shims = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    shims.mkdir()
    (tmp_path / "tutorial.sh").write_text(script(TUTORIAL.read_text()))
    # `python` is this interpreter (a wrapper, not a symlink: a symlink to a venv's python loses the venv),
    # whatever else is on PATH and whether or not its folder has a `python`.
    (shims / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (shims / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(GLOWSDK_SOURCE=str(REPO), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PATH=f"{shims}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    run = subprocess.run(["bash", str(tmp_path / "tutorial.sh")], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^mychip\s+\(mychip_backend:MyChipBackend\)", out, re.M), out
    assert "matches the interpreter" in out
    assert "primitives: 4 of 4 declared cells pass" in out
    venv_python = work / ".venv" / "bin" / "python"
    assert venv_python.exists()
    where = subprocess.run([str(venv_python), "-c", "import mychip_backend; print(mychip_backend.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
    assert str(work / "mychip") in where.stdout, where.stdout + where.stderr
