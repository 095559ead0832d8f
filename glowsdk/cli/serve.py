"""`glowsdk serve-bench`: a network served by the host runtime on simulated NPUs and the CPU, under load.

Requests are submitted as fast as the runtime admits them, with `--concurrency` request slots
(the HostManager's blocking back-pressure), so that many are in flight at once. Reported:
wall throughput and latency percentiles (host time, queueing included), device-time latency (the
longest chain of partition times: simulated seconds on NPUs, wall seconds on the CPU), each
device's runs and busy time on its own clock with its share of the busiest device's, and the
partition table. `--check` compares every response with the interpreter running the same graph:
integer outputs exactly, float outputs within a relative tolerance of their dtype (`CHECK_RTOL`),
since the cpu backend's float kernels (its `sin`, its summation order) round differently from
numpy's by a few ulps.

The host runtime partitions with its own partitioner (runtime/partitioner.py): what the NPUs do not
run in int8 becomes CPU partitions. `--fallback` says what compiles them: cpu (the cpu backend, the
interpreter where it refuses), interpreter, or none, which refuses a model with a CPU partition that
computes anything but the int8 <-> float conversions at the NPU partitions' borders.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from ..errors import GlowError
from ..files import check_writable_file, write_text
from ..progress import Progress, progress
from ..table import format_table
from . import options

DEVICE_KINDS = ("npu", "cpu")
CHECK_RTOL = {"float64": 1e-5, "float32": 1e-5, "float16": 1e-3, "bfloat16": 1e-2}
"""--check: a float output matches when every element is within this fraction of the output's largest
magnitude (relative to the whole tensor, so values near zero are not held to ulps of zero)."""
FALLBACKS = {"cpu": "cpu", "interpreter": "interpreter", "none": None}
"""--fallback -> the Provisioner's host fallback."""


def parse_devices(text: str) -> dict[str, int]:
    """'npu:4,cpu:1' -> {'npu': 4, 'cpu': 1}."""
    counts: dict[str, int] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        kind, _, count = item.partition(":")
        if kind not in DEVICE_KINDS or not count.isdigit() or int(count) < 1:
            raise GlowError(f"--devices {item!r}: expected KIND:COUNT with KIND one of {', '.join(DEVICE_KINDS)} "
                            f"and COUNT at least 1")
        counts[kind] = counts.get(kind, 0) + int(count)
    if not counts:
        raise GlowError("--devices names no device")
    return counts


def build_devices(counts: dict[str, int], config: str, heap: int | None) -> list:
    from firmware_runtime import NpuDevice
    from isa.config import resolve_config

    from ..runtime import CpuDeviceManager, NpuDeviceManager

    machine = resolve_config(config)
    devices: list = [NpuDeviceManager(NpuDevice(machine, name=f"npu{i}", heap_bytes=heap))
                     for i in range(counts.get("npu", 0))]
    return devices + [CpuDeviceManager(f"cpu{i}") for i in range(counts.get("cpu", 0))]


def outputs_match(got: np.ndarray, want: np.ndarray) -> bool:
    """Whether a response's output equals the interpreter's: exactly for integers and bools, within
    CHECK_RTOL for floats (NaN where the interpreter has NaN, infinities equal)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    rtol = CHECK_RTOL.get(want.dtype.name)
    if rtol is None:
        return bool(np.array_equal(got, want))
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite, infinite = np.isfinite(want), np.isinf(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)) or not np.array_equal(got[infinite], want[infinite]):
        return False
    scale = float(np.abs(want[finite]).max(initial=0.0)) or 1.0
    return bool(np.all(np.abs(got[finite] - want[finite]) <= rtol * scale))


def partition_rows(host, name: str) -> list[dict]:
    entry = host.networks[name]
    rows = []
    for p in entry.plan.partitions:
        rows.append({"partition": p.index, "kind": p.kind, "backend": p.backend, "ops": p.ops,
                     "memory_bytes": p.memory_bytes, "inputs": p.inputs, "outputs": p.outputs,
                     "depends": sorted(p.depends), "border_bytes_in": entry.plan.border_bytes(p),
                     "devices": [d.name for d, _ in entry.placement.replicas[p.index]]})
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def cmd_serve_bench(args: argparse.Namespace) -> int:
    from ..reference.evaluator import evaluate
    from ..runtime import HostManager, Provisioner

    if args.json:
        check_writable_file(args.json, "--json")
    counts = parse_devices(args.devices)
    if "npu" in counts:   # before the model is loaded and calibrated
        options.check_config(args.config)
    args.target = "npu" if "npu" in counts else "cpu"
    network = options.load_network(args)
    quantization = options.quantization_config(args, network) if "npu" in counts else None
    with HostManager(build_devices(counts, args.config, args.heap), queue_size=args.concurrency,
                     when_full="block") as host:
        # the host's provisioner, with the fallback asked for (the same devices and NPU preset)
        host.provisioner = Provisioner(host.devices, host.provisioner.npu_config, host.provisioner.max_replicas,
                                       fallback=FALLBACKS[args.fallback])
        with Progress("provisioning", None, "") as bar:
            bar.label("partitioning and compiling for the devices")
            plan = host.add_network("model", network, quantization)
        inputs = [network.random_inputs(args.seed + i) for i in range(min(args.requests, args.distinct_inputs))]
        began = time.perf_counter()
        with Progress("serving", args.requests, "request") as bar:  # open while sending: a full queue blocks
            bar.label("sending")
            futures = [host.run("model", inputs[i % len(inputs)]) for i in range(args.requests)]
            responses = []
            for future in futures:
                responses.append(future.result())
                bar(len(responses))
        wall = time.perf_counter() - began
        mismatches = None
        if args.check:
            wanted = [evaluate(plan.graph, x) for x in progress(inputs, "checking", unit="input")]
            mismatches = sum(any(not outputs_match(r.outputs[k], v) for k, v in wanted[i % len(inputs)].items())
                             for i, r in enumerate(responses))
        busiest = max(d.busy_seconds for d in host.devices) or 1.0
        report = {
            "model": args.model, "devices": args.devices, "fallback": args.fallback, "requests": args.requests,
            "concurrency": args.concurrency, "wall_seconds": wall, "throughput_per_s": args.requests / wall,
            "device_throughput_per_s": args.requests / busiest,
            "latency_wall": _percentiles([r.wall_seconds for r in responses]),
            "latency_device": _percentiles([r.device_seconds for r in responses]),
            "retries": sum(r.retries for r in responses), "mismatches": mismatches,
            "device_stats": [{"device": d.name, "kind": d.kind, "runs": d.runs, "failures": d.failures,
                              "busy_seconds": d.busy_seconds, "utilisation": d.busy_seconds / busiest}
                             for d in host.devices],
            "partitions": partition_rows(host, "model"),
        }
    _print(report)
    if args.json:
        write_text(args.json, json.dumps(report, indent=1) + "\n", "--json")
        print(f"wrote {args.json}")
    return 0 if not mismatches else 1


def _percentiles(values: list[float]) -> dict[str, float]:
    data = np.asarray(values)
    return {"p50": float(np.percentile(data, 50)), "p99": float(np.percentile(data, 99)),
            "mean": float(data.mean())}


def _print(report: dict) -> None:
    print(f"{report['requests']} requests, concurrency {report['concurrency']}, devices {report['devices']}")
    rows = [[p["partition"], p["kind"], p["backend"], f"{p['memory_bytes']:,}",
             ", ".join(map(str, p["depends"])) or "-", ", ".join(p["devices"]),
             ", ".join(f"{k} x{n}" for k, n in p["ops"].items()) or "conversions only"] for p in report["partitions"]]
    print(format_table(["partition", "kind", "backend", "memory (B)", "after", "devices", "ops"], rows))
    print(f"throughput: {report['throughput_per_s']:.1f} req/s wall; {report['device_throughput_per_s']:.1f} req/s "
          f"device time (requests / busiest device's busy time)")
    for what in ("wall", "device"):
        lat = report[f"latency_{what}"]
        print(f"latency ({what}): p50 {_ms(lat['p50'])}, p99 {_ms(lat['p99'])}, mean {_ms(lat['mean'])}")
    rows = [[d["device"], f"{d['runs']:,}", d["failures"], f"{d['busy_seconds'] * 1e3:.3f}",
             "simulated" if d["kind"] == "npu" else "wall", f"{d['utilisation']:.0%}"] for d in report["device_stats"]]
    print(format_table(["device", "runs", "failures", "busy (ms)", "clock", "utilisation"], rows,
                       "utilisation: busy time against the busiest device's"))
    if report["mismatches"] is not None:
        print(f"check: {report['mismatches']} of {report['requests']} responses differ from the interpreter")
    print(f"retries: {report['retries']}")


def add_serve_bench_args(p: argparse.ArgumentParser) -> None:
    options.add_model_args(p)
    options.add_quantization_args(p)
    p.add_argument("--devices", default="npu:4,cpu:1", help="devices as KIND:COUNT,... (default npu:4,cpu:1)")
    p.add_argument("--config", default="default", metavar="PRESET|FILE", help="the NPUs' architecture (default)")
    p.add_argument("--heap", type=options.positive_count, metavar="BYTES",
                   help="device DRAM each NPU gives networks (default: all of it)")
    p.add_argument("--requests", type=options.positive_count, default=1000, help="requests to send (default 1000)")
    p.add_argument("--concurrency", type=options.positive_count, default=32,
                   help="requests in flight at most (default 32)")
    p.add_argument("--distinct-inputs", type=options.positive_count, default=64,
                   help="distinct seeded random inputs, reused in turn (default 64)")
    p.add_argument("--seed", type=options.seed_number, default=0, help="seed of the first input (default 0)")
    p.add_argument("--fallback", choices=list(FALLBACKS), default="cpu",
                   help="what compiles the CPU partitions (the ops the NPUs do not run): cpu (default; the "
                        "interpreter where cpu refuses), interpreter, or none to refuse such a model")
    p.add_argument("--check", action="store_true",
                   help="compare every response with the interpreter: integer outputs exactly, float outputs "
                        "within 1e-5 of the output's largest magnitude (float16 1e-3, bfloat16 1e-2: the cpu "
                        "backend's float kernels round differently from numpy's by a few ulps)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.set_defaults(func=cmd_serve_bench)


SUBCOMMANDS = {"serve-bench": add_serve_bench_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
