"""`glowsdk sweep`: compile and simulate models over a grid of NPU configurations, locally or on Ray.

Everything the sweep is given (models, grid, profiles, the output folder) is checked before the first point
runs; then every point's row goes to DIR/results.csv as it finishes, so a killed sweep resumes with
`--resume`. The Pareto fronts (latency, energy, area) are printed at the end and drawn in DIR/report.html.
"""
from __future__ import annotations

import argparse
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from ..errors import GlowError
from ..files import check_writable_folder, write_text
from ..progress import Progress
from ..table import format_table
from . import options


def _models(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise GlowError("--models: give at least one model (M1,M2: bundled names or .onnx files)")
    if len(set(names)) != len(names):
        raise GlowError(f"--models: a model is named twice ({text})")
    return names


def _profiles(texts: list[str], models: list[str]) -> dict[str, str]:
    """--load-profile MODEL=FILE, each for a model of the sweep (a profile fits one model only)."""
    profiles = {}
    for text in texts:
        model, sep, path = text.rpartition("=")
        if not sep or not model or not path:
            raise GlowError(f"--load-profile '{text}': expected MODEL=profile.json")
        if model not in models:
            raise GlowError(f"--load-profile {model}: not one of --models ({', '.join(models)})")
        profiles[model] = path
    return profiles


def _load(name: str, args: argparse.Namespace, profile_path: str | None):
    """The model loaded in this process (forked workers inherit it) and its profile if given: both checked
    before the sweep writes anything."""
    from ..quantization import load_profile
    from ..sweep.point import ModelSpec, load_model

    spec = ModelSpec(name, args.batch, args.random_weights)
    with Progress("loading", None, "") as bar:
        bar.label(name)
        load_model(spec)
    return spec, None if profile_path is None else load_profile(profile_path)


def _prepare(spec, profile, args: argparse.Namespace):
    """The model with its quantization, made once for every point (calibrated here when given no profile)."""
    from ..quantization import QuantizationConfig, calibration_random, collect_profile
    from ..sweep.point import PreparedModel, load_model

    if profile is None:
        network = load_model(spec)
        with Progress(f"calibrating {spec.name}", args.calibration_random, "sample") as bar:
            profile = collect_profile(network, calibration_random(network, args.calibration_random), progress=bar)
    return PreparedModel(spec, QuantizationConfig(profile))


def cmd_sweep(args: argparse.Namespace) -> int:
    from ..sweep.executors import EXECUTORS, LOST
    from ..sweep.grid import load_grid
    from ..sweep.report import format_report
    from ..sweep.results import ResultsFile, read_rows, write_parquet

    models = _models(args.models)
    profiles = _profiles(args.load_profile, models)
    grid = load_grid(args.grid)
    if args.address is not None and args.executor != "ray":
        raise GlowError("--address: joins a Ray cluster: give --executor ray")
    if args.executor == "ray":
        try:
            import ray  # noqa: F401  (checked now, not after the calibration)
        except ImportError:
            raise GlowError("--executor ray needs Ray: pip install 'glowsdk[distributed]'") from None
    check_writable_folder(args.o, "-o")
    loaded = [_load(name, args, profiles.get(name)) for name in models]
    spec = {"models": models, "batch": args.batch, "random_weights": args.random_weights,
            "profiles": profiles, "calibration_random": None if len(profiles) == len(models) else
            args.calibration_random, "grid": grid.text}
    results = ResultsFile(args.o, spec, grid.parameters, args.resume)
    try:
        done = {key for key, row in results.done.items() if not row["error"].startswith(LOST)}
        if done:
            print(f"resuming: {len(done)} of {len(models) * len(grid.points)} points done already", file=sys.stderr)
        tasks = []
        for spec, profile in loaded:
            todo = [p for p in grid.points if (spec.name, p.key) not in done]
            if todo:
                model = _prepare(spec, profile, args)
                tasks += [(model, p) for p in todo]
        started = time.perf_counter()
        failed = 0
        # closing: an interrupted sweep stops its workers (and a Ray cluster it started) before it ends
        with Progress("sweep", len(tasks), "point") as bar, \
                closing(EXECUTORS[args.executor](tasks, args.workers, args.address)) as finished:
            for count, row in enumerate(finished, 1):
                results.write(row)
                failed += row["status"] != "ok"
                elapsed = time.perf_counter() - started
                bar(count, None, f"{failed} failed, {_duration(elapsed / count * (len(tasks) - count))} left")
        wall = time.perf_counter() - started
    finally:
        results.close()
    rows = read_rows(args.o)
    print(f"{len(tasks)} points run ({len(models)} model(s) x {len(grid.points)} configurations"
          f"{f', {len(done)} done before' if done else ''}) by the {args.executor} executor in {wall:.1f} s wall; "
          f"{failed} failed; the points' own compile + simulate time sums to "
          f"{sum(_seconds(r) for r in rows if r['status'] == 'ok' and (r['model'], r['point']) not in done):.1f} s")
    print(format_fronts(rows, grid.parameters))
    print(f"wrote {results.path}")
    page = Path(args.o) / "report.html"
    with Progress("drawing the report", None, "") as bar:  # matplotlib's import and plots take seconds
        bar.label(str(page))
        write_text(page, format_report(rows, grid.parameters, f"glowsdk sweep: {', '.join(models)}"), "-o")
    print(f"wrote {page}")
    parquet = write_parquet(args.o)
    if parquet is not None:
        print(f"wrote {parquet}")
    return 0


def _seconds(row: dict[str, Any]) -> float:
    return (row["compile_s"] or 0.0) + (row["simulate_s"] or 0.0)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def format_fronts(rows: list[dict[str, Any]], parameters: tuple[str, ...]) -> str:
    """The Pareto front of each model and of all models together, one table."""
    from ..sweep.pareto import fronts

    table = []
    for model, front in fronts(rows).items():
        for row in front:
            table.append([model, *(row[p] for p in parameters), f"{row['latency_s'] * 1e3:.4f}",
                          f"{row['energy_uj']:.1f}", f"{row['area_mm2']:.3f}", row["point"]])
    failed = [r for r in rows if r["status"] != "ok"]
    lines = [format_table(["model", *parameters, "latency (ms)", "energy (uJ)", "area (mm2)", "point"], table,
                          "Pareto front: no other point is at once faster, more frugal and smaller; "
                          "(all models): geometric means over the models")]
    if failed:
        lines.append(f"{len(failed)} point(s) failed, for example {failed[0]['model']} at {failed[0]['point']}: "
                     f"{failed[0]['error']}")
    return "\n".join(lines)


def add_sweep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models", required=True, metavar="M1,M2", help="bundled model names or .onnx files")
    p.add_argument("--grid", required=True, metavar="grid.toml",
                   help="the base (preset = ...) and, under [grid], a list of values per swept parameter")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local: processes on this machine (default); ray: Ray tasks (pip install "
                        "'glowsdk[distributed]')")
    p.add_argument("--address", metavar="ADDR", help="ray: join the cluster at ADDR (default: start a local one)")
    p.add_argument("--workers", type=options.positive_count, metavar="N",
                   help="points run at once (default: the machine's cores, or the Ray cluster's CPUs)")
    p.add_argument("-o", required=True, metavar="DIR", help="write results.csv (and the report) into DIR")
    p.add_argument("--resume", action="store_true", help="continue the sweep in DIR: run only the points not done")
    p.add_argument("--batch", type=options.positive_count, help="re-batch the models to N (bundled-style models)")
    p.add_argument("--random-weights", type=options.seed_number, metavar="SEED",
                   help="replace float weights with seeded random ones (the bundled models' are constant)")
    p.add_argument("--load-profile", action="append", default=[], metavar="MODEL=FILE",
                   help="quantize MODEL with this profile (from `glowsdk profile`); others calibrate on random inputs")
    p.add_argument("--calibration-random", type=options.positive_count, metavar="N",
                   default=options.RANDOM_CALIBRATION_DEFAULT,
                   help=f"random calibration samples for models without a profile (default "
                        f"{options.RANDOM_CALIBRATION_DEFAULT}; accuracy is then unknown)")
    p.set_defaults(func=cmd_sweep)


SUBCOMMANDS = {"sweep": add_sweep_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
