"""vendor_guide/tutorial.md, followed literally in a fresh virtual environment, so it cannot rot.

Every fenced block runs in order in one bash script: a block whose info string
names a file (```python file=first_model.py) is written to that file, a bash
block is run as it stands. The environment is a new venv with
--system-site-packages (numpy, onnx, llvmlite come from this one; pip is held
offline), in an empty folder; GLOWSDK_SOURCE points at this repository.
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


def test_the_tutorial_runs_literally_in_a_fresh_venv(tmp_path: Path) -> None:
    """About 30-40 s: a venv, two editable installs, one model on two targets, a conformance run."""
    (tmp_path / "tutorial.sh").write_text(script(TUTORIAL.read_text()))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(GLOWSDK_SOURCE=str(REPO), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    run = subprocess.run(["bash", "tutorial.sh"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    out = run.stdout
    assert re.search(r"^mychip\s+\(mychip_backend:MyChipBackend\)", out, re.M), out
    assert "matches the interpreter" in out
    assert "primitives: 4 of 4 declared cells pass" in out
    assert (tmp_path / ".venv" / "bin" / "python").exists()
    venv_python = tmp_path / ".venv" / "bin" / "python"
    where = subprocess.run([str(venv_python), "-c", "import mychip_backend; print(mychip_backend.__file__)"],
                           capture_output=True, text=True, timeout=60, cwd=REPO)
    assert str(tmp_path / "mychip") in where.stdout, where.stdout + where.stderr
