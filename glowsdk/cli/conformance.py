"""`glowsdk conformance`: the primitive suite, the ONNX node tests and the model zoo on a target."""
from __future__ import annotations

import argparse
import json

from ..files import check_writable_file, write_text
from ..progress import Progress
from . import options


def cmd_conformance(args: argparse.Namespace) -> int:
    from ..api import fallback_backends
    from ..backends.registry import get_backend
    from ..conformance import report

    backend = get_backend(args.target)
    for path, flag in ((args.json, "--json"), (args.markdown, "--markdown")):
        if path:
            check_writable_file(path, flag)
    # the models suite only: the primitive and node suites describe the target itself
    fallbacks = fallback_backends(options.fallback_name(args)) if args.suite in ("models", "all") else []
    payload: dict = {"target": args.target}
    failed = False
    sections: dict = {}
    if args.suite in ("primitives", "all"):
        from ..conformance.primitives import run_primitive_suite

        names = args.primitives.split(",") if args.primitives else None
        bar = Progress("primitives")
        results = sections["primitives"] = run_primitive_suite(
            backend, names, lambda d, t, r: bar(d, t, f"{r.primitive} {r.kind.value}"))
        bar.close()
        print(report.primitive_report(results))
        columns, rows = report.primitive_matrix(results)
        payload["primitives"] = {"totals": report.primitive_counts(results),
                                 "matrix": {p: {k.value: s for k, s in row.items()} for p, row in rows.items()},
                                 "cells": [r.to_json() for r in results]}
        failed |= any(r.status in ("fail", "error") for r in results)
    if args.suite in ("nodes", "all"):
        from ..conformance.node_tests import run_node_tests

        ops = args.ops.split(",") if args.ops else None
        bar = Progress("node tests")
        results = sections["nodes"] = run_node_tests(backend, ops, lambda d, t, r: bar(d, t, r.name))
        bar.close()
        print(report.node_report(results))
        payload["node_tests"] = {"totals": report.totals(results), "per_op": report.per_op(results),
                                 "cases": [r.to_json() for r in results]}
        failed |= any(r.status != "pass" for r in results)
    if args.suite in ("models", "all"):
        from ..conformance.models import run_model_zoo

        names = args.models.split(",") if args.models else None
        bar = Progress("model zoo")
        results = sections["models"] = run_model_zoo(backend, names,
                                                      lambda d, t, r: bar(d, t, f"{r.model} {r.check}"),
                                                      fallbacks=fallbacks)
        bar.close()
        if fallbacks:
            print(f"model zoo on {args.target} (--fallback {args.fallback}: what it cannot run goes there)")
        print(report.model_report(results))
        payload["models"] = {"totals": report.totals(results), "cases": [r.to_json() for r in results]}
        if fallbacks:
            payload["models"]["fallback"] = args.fallback
        failed |= any(r.status not in ("pass", "skipped") for r in results)
    if args.json:
        write_text(args.json, json.dumps(payload, indent=2), "--json")
        print(f"wrote {args.json}")
    if args.markdown:
        write_text(args.markdown, report.markdown_report(args.target, **sections), "--markdown")
        print(f"wrote {args.markdown}")
    return 1 if failed and args.strict else 0


def add_conformance_args(conf: argparse.ArgumentParser) -> None:
    conf.add_argument("--target", default="interpreter")
    conf.add_argument("--suite", choices=["primitives", "nodes", "models", "all"], default="all")
    conf.add_argument("--primitives", help="only these primitives (comma-separated; primitives suite)")
    conf.add_argument("--ops", help="only node tests using these ops (comma-separated)")
    conf.add_argument("--models", help="only these bundled models (comma-separated)")
    conf.add_argument("--json", metavar="FILE", help="also write the full report as JSON")
    conf.add_argument("--markdown", metavar="FILE", help="also write the support matrix and totals as Markdown")
    conf.add_argument("--strict", action="store_true", help="exit 1 if any case does not pass")
    conf.add_argument("--fallback", default="none", metavar="DEVICE",
                      help="models suite: run what the target cannot on this backend and report each model's "
                           "partitions and share of MACs on the target (default none: a partial model fails); "
                           "the primitives and nodes suites ignore it (they test the target itself)")
    conf.set_defaults(func=cmd_conformance)


SUBCOMMANDS = {"conformance": add_conformance_args}
"""The command's arguments and handler, added when it is the one run (main.COMMANDS)."""
