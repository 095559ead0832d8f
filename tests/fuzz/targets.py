"""The four readers as byte-level fuzz targets for a coverage-guided engine (bench/fuzz_atheris.py).

A `Target` gives the engine what libFuzzer-style engines take: seed files (real inputs, written
to the corpus folder), `run(data) -> Outcome` judged as the random fuzzers judge (ok, error,
crash, memory: tests/fuzz/onnx_harness.py), and `mutate(rng, data) -> data`, the structure-aware
mutators of the random fuzzers applied to any corpus entry (the engine's custom mutator).
`random_run(index)` is the random fuzzer's own mutant `index`, for comparing the two.

Payloads are bytes, as the engine keeps them:

- onnx: the serialized model; a model with external data is `MAGIC`, the 4-byte little-endian
  length of `weights.bin` (the one file the mutators write beside a model), that file, then the
  model. A child parses its parent and takes one to three mutations (onnx_mutations.MUTATIONS).
- npub: the file; `npub_mutations.mutate`.
- config: a TOML or JSON file (JSON when it starts with '{'); profile: the JSON file. A child
  that still parses takes tree edits then text edits, one that does not, text edits only
  (reader_harness, reader_mutations). Every configuration input also goes through
  `glowsdk disasm --config` (one random mutant in ten does): which inputs do must not depend on the
  bytes, or libFuzzer's reduction of an input (same coverage, fewer bytes) would change its path.

A mutator that cannot apply to its parent (a model that no longer parses) raises `Skip`; the
engine then mutates the bytes itself.
"""
from __future__ import annotations

import json
import os
import random
import struct
import tomllib
from collections.abc import Callable
from dataclasses import dataclass

from .onnx_harness import Outcome

MAGIC = b"GLOWFUZZ-EXTERNAL\n"
WEIGHTS = "weights.bin"
TARGETS = ("onnx", "npub", "config", "profile")


class Skip(Exception):
    """The structure-aware mutator cannot apply to this input."""


@dataclass
class Target:
    name: str
    seeds: dict[str, bytes]
    run: Callable[[bytes], Outcome]
    mutate: Callable[[random.Random, bytes], bytes]
    random_run: Callable[[int], Outcome]
    weights: dict[str, float] | None = None
    """How often to start a mutant from each seed (`--reseed`); None: equally."""


def _edits(rng: random.Random) -> int:
    return rng.choice([1, 1, 1, 2, 2, 3])


# -- ONNX ---------------------------------------------------------------------------------------
def pack_onnx(model: bytes, files: dict[str, bytes]) -> bytes:
    """One payload for a model and its external-data file."""
    if not files:
        return model
    weights = files[WEIGHTS]
    return MAGIC + struct.pack("<I", len(weights)) + weights + model


def unpack_onnx(data: bytes) -> tuple[bytes, dict[str, bytes]]:
    """(model bytes, files) of a payload; bytes that do not hold a whole file are all model."""
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 4:
        return data, {}
    (size,) = struct.unpack_from("<I", data, len(MAGIC))
    start = len(MAGIC) + 4
    if start + size > len(data):
        return data, {}
    return data[start + size:], {WEIGHTS: data[start:start + size]}


def onnx_target(folder: str, seed: int = 0) -> Target:
    import onnx

    from . import onnx_harness
    from .onnx_mutations import Mutant, apply
    from .onnx_seeds import seeds

    def run(data: bytes) -> Outcome:
        model, files = unpack_onnx(data)
        return onnx_harness.run_model(folder, model, files)

    def mutate(rng: random.Random, data: bytes) -> bytes:
        model_bytes, files = unpack_onnx(data)
        model = onnx.ModelProto()
        try:
            model.ParseFromString(model_bytes)
        except Exception as err:  # protobuf's DecodeError and friends: the engine mutates the bytes
            raise Skip(str(err)) from err
        m = apply(Mutant(model, dict(files)), rng, _edits(rng))
        return pack_onnx(m.serialize(), m.files)

    def random_run(index: int) -> Outcome:
        return onnx_harness.run_mutant(seed, index, folder)

    return Target("onnx", {f"{n}.onnx": d for n, d in seeds().items()}, run, mutate, random_run)


# -- .npub --------------------------------------------------------------------------------------
def npub_target(seed: int = 0) -> Target:
    from . import npub_harness
    from .npub_mutations import mutate as npub_mutate
    from .npub_seeds import SEEDS, WEIGHTS, seed_bytes

    def mutate(rng: random.Random, data: bytes) -> bytes:
        return npub_mutate(data, rng, _edits(rng))[0]

    return Target("npub", {f"{n}.npub": seed_bytes(n) for n in SEEDS}, npub_harness.run_npub, mutate,
                  lambda index: npub_harness.run_mutant(seed, index), {f"{n}.npub": w for n, w in WEIGHTS.items()})


# -- configuration and profile files ------------------------------------------------------------
def _is_json(data: bytes) -> bool:
    return data.lstrip()[:1] == b"{"


def _parse(data: bytes, syntax: str):
    try:
        return json.loads(data) if syntax == "json" else tomllib.loads(data.decode())
    except Exception:  # noqa: BLE001  (not parseable any more: text edits only)
        return None


def _child(rng: random.Random, data: bytes, syntax: str) -> bytes:
    from .reader_harness import _mutated
    from .reader_mutations import edit_text, toml_dumps

    tree = _parse(data, syntax)
    if isinstance(tree, dict):
        def text_of(t):
            if t is None:
                return data
            return json.dumps(t).encode() if syntax == "json" else toml_dumps(t).encode()
        try:
            out, log = _mutated(rng, tree, text_of, syntax)
        except RecursionError:  # a tree nested nearly as deep as the parser allows: copying it overflows
            log = ["unchanged"]
        if log != ["unchanged"]:
            return out
    out = data
    for _ in range(rng.choice((1, 1, 2))):
        out = edit_text(rng, out, syntax)
    return out


def reader_target(kind: str, folder: str, seed: int = 0) -> Target:
    from . import reader_harness
    from .reader_mutations import toml_dumps

    def random_run(index: int) -> Outcome:
        return reader_harness.run_mutant(kind, seed, index, folder)

    if kind == "config":
        seeds = {}
        for name, table in reader_harness.config_seeds().items():
            seeds[f"{name}.toml"] = toml_dumps(table).encode()
            seeds[f"{name}.json"] = json.dumps(table).encode()

        def run(data: bytes) -> Outcome:
            suffix = ".json" if _is_json(data) else ".toml"
            return reader_harness.run_config(data, suffix, folder, cli=True)

        def mutate(rng: random.Random, data: bytes) -> bytes:
            return _child(rng, data, "json" if _is_json(data) else "toml")

        return Target("config", seeds, run, mutate, random_run)

    def run_profile(data: bytes) -> Outcome:
        return reader_harness.run_profile(data, folder)

    return Target("profile", {f"{n}.json": d for n, d in reader_harness.profile_seeds().items()}, run_profile,
                  lambda rng, data: _child(rng, data, "json"), random_run,
                  {f"{n}.json": w for n, w in reader_harness.PROFILE_WEIGHTS.items()})


def make(name: str, folder: str, seed: int = 0) -> Target:
    """The target called `name`, using `folder` for the files it writes."""
    os.makedirs(folder, exist_ok=True)
    if name == "onnx":
        return onnx_target(os.path.join(folder, "m"), seed)
    if name == "npub":
        return npub_target(seed)
    return reader_target(name, folder, seed)
