"""What the light commands import. `glowsdk --version`, `scalesim` and `simulate` start in a fraction
of a second only while they leave the ONNX frontend, LLVM and the compiler unloaded; each runs here in
a fresh interpreter and the modules it loaded are checked (structure, not a timing)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from isa.container import write_npub
from test_sim_reports import example_binary

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "bench" / "scalesim_examples"
HEAVY = ("onnx", "onnxruntime", "llvmlite", "glowsdk.frontend", "glowsdk.compiler.pipeline",
         "glowsdk.compiler.passes", "glowsdk.compiler.lowering", "glowsdk.backends", "glowsdk.quantization")
"""Never loaded by the three commands."""


def loaded_by(argv: list[str]) -> tuple[int, set[str]]:
    """Run `glowsdk argv` in a new interpreter; its exit code and the names of the modules it loaded."""
    script = ("import json, sys\nfrom glowsdk.cli.main import main\n"
              "try:\n    code = main(sys.argv[1:])\nexcept SystemExit as done:\n    code = done.code\n"
              "print(json.dumps([code, sorted(sys.modules)]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, env=env, check=True)
    code, modules = json.loads(done.stdout.splitlines()[-1])
    return code, set(modules)


def under(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def test_version_loads_no_numpy_and_no_glowsdk_layer():
    code, modules = loaded_by(["--version"])
    assert code == 0
    assert under(modules, ("numpy", "tqdm", "isa", "sim", "glowsdk.graph", *HEAVY)) == []


def test_scalesim_loads_its_model_only(tmp_path):
    code, modules = loaded_by(["scalesim", "--config", str(EXAMPLES / "scale.cfg"), "--topology",
                               str(EXAMPLES / "test.csv"), "-o", str(tmp_path)])
    assert code == 0 and (tmp_path / "COMPUTE_REPORT.csv").is_file()
    assert "sim.scalesim.model" in modules
    # not even the NPU simulator, the ISA or the graph: SCALE-Sim's model shares none of them
    assert under(modules, ("isa", "simpy", "sim.simulator", "glowsdk.graph", "glowsdk.compiler", "tqdm",
                           *HEAVY)) == []


def test_simulate_loads_the_simulator_not_the_compiler(tmp_path):
    path = tmp_path / "conv.npub"
    write_npub(path, example_binary())
    code, modules = loaded_by(["simulate", str(path), "--checked"])
    assert code == 0
    assert "sim.simulator" in modules and "sim.races" in modules
    assert under(modules, HEAVY) == []
