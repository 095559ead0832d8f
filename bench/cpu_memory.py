"""Issue 24's memory target: the peak resident memory of one run, glowsdk's cpu target against onnxruntime.

Each side runs in a fresh process and its peak resident set (the kernel's
ru_maxrss of exactly that child, os.wait4) is what the table shows:

- glowsdk, cold: `python -m glowsdk run MODEL --target cpu` with an empty compile
  cache (it compiles, stores the entry and runs once);
- glowsdk, cached: the same command again, loading that entry;
- onnxruntime: a process that imports only numpy and onnxruntime, opens an
  InferenceSession on the same .onnx file (default options, 1 thread) and runs it
  once on seeded random inputs.

The target: both glowsdk rows below onnxruntime's. Writes a markdown table to
stdout and everything to --json.

    python bench/cpu_memory.py [--models resnet50,squeezenet] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from glowsdk.zoo.bundled import bundled_path, is_bundled

ORT_CHILD = """
import sys
import numpy as np
import onnxruntime as ort

options = ort.SessionOptions()
options.intra_op_num_threads = 1
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
rng = np.random.default_rng(0)
kinds = {"tensor(float)": np.float32, "tensor(int64)": np.int64, "tensor(int32)": np.int32}
feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(kinds[i.type])
         for i in session.get_inputs()}
session.run(None, feeds)
"""
"""The onnxruntime side: nothing imported but what it needs to load and run the model."""


def peak_rss_mb(command: list[str], env: dict[str, str]) -> float:
    """Run `command` to completion in a fresh process; its peak resident set in MB (1e6 bytes)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode(errors="replace") if process.stderr else ""
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}): {error.strip().splitlines()[-1:]}")
    return usage.ru_maxrss * 1024 / 1e6  # Linux reports KiB


def model_path(name: str) -> Path:
    return bundled_path(name) if is_bundled(name) else Path(name)


def measure(name: str) -> dict:
    """Peak RSS of glowsdk (cold, then from the cache) and onnxruntime running `name` once."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as cache:
        env["GLOWSDK_CACHE_DIR"] = cache
        os.chmod(cache, 0o700)
        run = [sys.executable, "-m", "glowsdk", "run", name, "--target", "cpu"]
        cold = peak_rss_mb(run, env)
        cached = peak_rss_mb(run, env)
    peer = peak_rss_mb([sys.executable, "-c", ORT_CHILD, str(model_path(name))], env)
    return {"model": name, "glowsdk_cold_mb": cold, "glowsdk_cached_mb": cached, "onnxruntime_mb": peer,
            "met": cold < peer and cached < peer}


def table(rows: list[dict]) -> str:
    lines = ["| model | glowsdk cold MB | glowsdk cached MB | onnxruntime MB | cold / ort | cached / ort | met? |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        peer = r["onnxruntime_mb"]
        lines.append(f"| {r['model']} | {r['glowsdk_cold_mb']:.0f} | {r['glowsdk_cached_mb']:.0f} | {peer:.0f} | "
                     f"{r['glowsdk_cold_mb'] / peer:.2f} | {r['glowsdk_cached_mb'] / peer:.2f} | "
                     f"{'yes' if r['met'] else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50", help="comma-separated bundled names or .onnx paths")
    parser.add_argument("--json", help="write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        rows.append(measure(name))
    print("## peak resident memory of one run (fresh process each)\n")
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}", file=sys.stderr)
    return 0 if all(r["met"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
