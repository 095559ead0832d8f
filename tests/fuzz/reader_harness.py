"""Running one mutated configuration or profile file through its reader, and judging it.

Targets:

- `config`: a preset written as a TOML file (and as JSON, one time in four), mutated, read by
  `isa.config.load_config`; one mutant in ten also goes through the command line,
  `glowsdk disasm SAMPLE.npub --config FILE`, whose exit code must be 0 or 2 with at most one
  line of `glowsdk: error:` (exit 1 is an internal error: a crash);
- `profile`: a real profile (`glowsdk profile squeezenet --calibration-random 2`, made once per
  process) or a smaller one holding the first one to four of its values (written by
  `save_profile`, fingerprint and all), mutated, read by `load_profile`.

Verdicts and root-cause keys are the .npub harness's (npub_harness.py): ok, error (one-line
GlowError), crash, memory.
"""
from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import random
import tempfile

from .npub_harness import _judge, root_cause
from .onnx_harness import Outcome
from .reader_mutations import Skip, edit_text, edit_tree, toml_dumps

TARGETS = ("config", "profile")


# -- seeds --------------------------------------------------------------------------------------
@functools.cache
def config_seeds() -> dict[str, dict]:
    """Each preset's file form: `preset`, `name`, then every parameter (sizes as text half the time)."""
    from isa.config import PARAMETERS, PRESETS, format_size

    seeds = {}
    for name, config in PRESETS.items():
        table = {"preset": name, "name": f"my-{name}"}
        table.update({p.name: getattr(config, p.name) for p in PARAMETERS})
        seeds[name] = table
        sizes = dict(table, name=f"{name}-sizes")
        sizes.update({p.name: format_size(getattr(config, p.name)) for p in PARAMETERS if p.unit == "bytes"})
        seeds[f"{name}-sizes"] = sizes
    seeds["minimal"] = {"array_rows": 8}
    return seeds


@functools.cache
def profile_seeds() -> dict[str, bytes]:
    """The squeezenet profile, and smaller real ones cut from it (version 2, and one version 1)."""
    import glowsdk
    from glowsdk.quantization import calibration_random, collect_profile
    from glowsdk.quantization.profile import Profile, format_profile

    net = glowsdk.load("squeezenet", random_weights=0)
    full = collect_profile(net, calibration_random(net, 2))
    seeds = {"squeezenet": format_profile(full).encode()}
    names = list(full.values)
    for k in (1, 2, 4):
        part = Profile(model=full.model, calibration=full.calibration, bins=full.bins,
                       glowsdk_version=full.glowsdk_version)
        part.values.update({n: full.values[n] for n in names[-k:] if True})
        seeds[f"last-{k}"] = format_profile(part).encode()
    v1 = json.loads(seeds["last-1"])
    v1["version"] = 1
    del v1["graph"]
    seeds["last-1-v1"] = json.dumps(v1).encode()
    return seeds


PROFILE_WEIGHTS = {"squeezenet": 3, "last-1": 40, "last-2": 25, "last-4": 12, "last-1-v1": 20}
"""The whole squeezenet profile takes 0.2 s to read, the cut ones a few ms."""


# -- mutants ------------------------------------------------------------------------------------
def _mutated(rng: random.Random, tree, text_of, syntax: str) -> tuple[bytes, list[str]]:
    log: list[str] = []
    tree = copy.deepcopy(tree)
    for _ in range(rng.choice((0, 1, 1, 2, 3))):
        try:
            log.append(edit_tree(rng, tree))
        except Skip:
            pass
    try:
        text = text_of(tree)
    except (RecursionError, ValueError):  # the writer refuses what the edit made; mutate the text instead
        text, log = text_of(None), ["(tree edit unwritable)"]
    for _ in range(rng.choice((0, 0, 1, 1, 2))):
        text = edit_text(rng, text, syntax)
        log.append("text edit")
    return text, log or ["unchanged"]


def config_mutant(seed: int, index: int) -> tuple[str, str, bytes, list[str]]:
    """(seed name, suffix, bytes, log) of configuration mutant `index`."""
    rng = random.Random(seed * 1_000_003 + index)
    seeds = config_seeds()
    name = rng.choice(sorted(seeds))
    suffix = ".json" if rng.random() < 0.25 else ".toml"
    base = seeds[name]
    if suffix == ".json":
        def text_of(tree):
            return json.dumps(base if tree is None else tree).encode()
    else:
        def text_of(tree):
            return toml_dumps(base if tree is None else tree).encode()
    data, log = _mutated(rng, base, text_of, suffix[1:])
    return name, suffix, data, log


def profile_mutant(seed: int, index: int) -> tuple[str, bytes, list[str]]:
    rng = random.Random(seed * 1_000_003 + index)
    seeds = profile_seeds()
    names = sorted(PROFILE_WEIGHTS)
    name = rng.choices(names, [PROFILE_WEIGHTS[n] for n in names])[0]
    tree = json.loads(seeds[name])

    def text_of(t):
        return seeds[name] if t is None else json.dumps(t).encode()

    data, log = _mutated(rng, tree, text_of, "json")
    return name, data, log


# -- running ------------------------------------------------------------------------------------
@functools.cache
def _sample_npub(folder: str) -> str:
    from .npub_seeds import seed_bytes

    path = os.path.join(folder, "sample.npub")
    with open(path, "wb") as f:
        f.write(seed_bytes("sample"))
    return path


def run_cli_config(path: str, folder: str) -> Outcome:
    """`glowsdk disasm sample.npub --config FILE`: exit 0 or 2 with a one-line error; else a crash."""
    from glowsdk.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["disasm", _sample_npub(folder), "--config", path])
    text = err.getvalue()
    if code == 0:
        return Outcome("ok", "cli")
    if code == 2 and text.startswith("glowsdk: error: ") and text.count("\n") == 1:
        return Outcome("error", "cli: exit 2", text.strip())
    return Outcome("crash", f"cli exit {code}", text.replace("\n", "\\n")[:300])


def run_config(data: bytes, suffix: str, folder: str, cli: bool) -> Outcome:
    from isa.config import load_config

    path = os.path.join(folder, "arch" + suffix)
    with open(path, "wb") as f:
        f.write(data)
    try:
        load_config(path)
    except RecursionError as err:
        return Outcome("crash", root_cause(err), "recursion")
    except Exception as err:  # noqa: BLE001
        outcome = _judge("load_config", err)
        if outcome.verdict != "error" or not cli:
            return outcome
    else:
        outcome = Outcome("ok", "load_config")
    if cli:
        return run_cli_config(path, folder)
    return outcome


def run_profile(data: bytes, folder: str) -> Outcome:
    from glowsdk.quantization.profile_reader import load_profile

    path = os.path.join(folder, "profile.json")
    with open(path, "wb") as f:
        f.write(data)
    try:
        load_profile(path)
    except RecursionError as err:
        return Outcome("crash", root_cause(err), "recursion")
    except Exception as err:  # noqa: BLE001
        return _judge("load_profile", err)
    return Outcome("ok", "load_profile")


def run_mutant(target: str, seed: int, index: int, folder: str) -> Outcome:
    if target == "config":
        name, suffix, data, log = config_mutant(seed, index)
        outcome = run_config(data, suffix, folder, cli=index % 10 == 0)
        name = f"{name}{suffix}"
    else:
        name, data, log = profile_mutant(seed, index)
        outcome = run_profile(data, folder)
    outcome.seed, outcome.log = name, tuple(log)
    return outcome


def new_folder() -> str:
    return tempfile.mkdtemp(prefix="glowfuzz-readers-")
