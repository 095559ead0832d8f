"""The three readers as `guided.Target`s: payloads, mutation of a corpus entry, running one.

- onnx: the payload is an `onnx_mutations.Mutant` (model, external files, invalid-UTF-8 patches);
  a child copies its parent's model, files and patches and takes one to three more mutations
  from `onnx_mutations.MUTATIONS`; it runs through `onnx_harness.run_model`.
- npub: the payload is the file's bytes; `npub_mutations.mutate` as the random fuzzer uses it;
  `npub_harness.run_npub`.
- config / profile: the payload is the file's bytes (and, for config, its suffix). A child parses
  its parent (TOML or JSON) and, when that works, takes tree edits then text edits
  (`reader_harness._mutated`); a parent that no longer parses gets text edits only. Every tenth
  configuration mutant also goes through `glowsdk disasm --config`, as in the random fuzzer.
"""
from __future__ import annotations

import json
import os
import random
import tomllib

from .guided import Target


def _edits(rng: random.Random) -> int:
    return rng.choice([1, 1, 1, 2, 2, 3])


# -- ONNX ---------------------------------------------------------------------------------------
def onnx_target(folder: str, seed: int = 0) -> Target:
    import onnx

    from . import onnx_harness
    from .onnx_mutations import MUTATIONS, Mutant
    from .onnx_seeds import seeds

    def start(data: bytes) -> Mutant:
        model = onnx.ModelProto()
        model.ParseFromString(data)
        return Mutant(model)

    def mutate(rng: random.Random, parent: Mutant):
        model = onnx.ModelProto()
        model.CopyFrom(parent.model)
        m = Mutant(model, dict(parent.files), list(parent.patches))
        count, names, tries = _edits(rng), list(MUTATIONS), 0
        while len(m.log) < count and tries < 4 * count:
            tries += 1
            name = rng.choice(names)
            try:
                applied = MUTATIONS[name](rng, m)
            except Exception:  # noqa: BLE001  (as onnx_mutations.mutate: an edit that cannot apply)
                applied = False
            if applied:
                m.log.append(name)
        return m, list(m.log)

    def run(m: Mutant, index: int):
        return onnx_harness.run_model(folder, m.serialize(), m.files)

    def fresh(index: int):
        name, m = onnx_harness.mutant_for(seed, index)
        return name, m, m.log

    return Target("onnx", [(n, start(d), 1.0) for n, d in sorted(seeds().items())], mutate, run, fresh,
                  size=lambda m: m.model.ByteSize() + sum(map(len, m.files.values())))


# -- .npub --------------------------------------------------------------------------------------
def npub_target(seed: int = 0) -> Target:
    from . import npub_harness
    from .npub_mutations import mutate as npub_mutate
    from .npub_seeds import WEIGHTS, seed_bytes

    def mutate(rng, data):
        return npub_mutate(data, rng, _edits(rng))

    def fresh(index):
        return npub_harness.mutant_for(seed, index)

    return Target("npub", [(n, seed_bytes(n), float(WEIGHTS[n])) for n in sorted(WEIGHTS)], mutate,
                  lambda data, index: npub_harness.run_npub(data), fresh)


# -- configuration and profile files ------------------------------------------------------------
def _parse(data: bytes, syntax: str):
    try:
        return json.loads(data) if syntax == "json" else tomllib.loads(data.decode())
    except Exception:  # noqa: BLE001  (not parseable any more: text edits only)
        return None


def _child(rng: random.Random, data: bytes, syntax: str, dump) -> tuple[bytes, list[str]]:
    from .reader_harness import _mutated
    from .reader_mutations import edit_text

    tree = _parse(data, syntax)
    if tree is not None and isinstance(tree, dict):
        out, log = _mutated(rng, tree, lambda t: data if t is None else dump(t), syntax)
    else:
        out, log = data, []
        for _ in range(rng.choice((1, 1, 2))):
            out = edit_text(rng, out, syntax)
            log.append("text edit")
    if log == ["unchanged"]:
        out, log = edit_text(rng, out, syntax), ["text edit"]
    return out, log


def reader_target(kind: str, folder: str, seed: int = 0) -> Target:
    from . import reader_harness
    from .reader_mutations import toml_dumps

    if kind == "config":
        def dump_for(suffix):
            return (lambda t: json.dumps(t).encode()) if suffix == ".json" else (lambda t: toml_dumps(t).encode())

        entries = []
        for name, table in sorted(reader_harness.config_seeds().items()):
            entries.append((f"{name}.toml", (".toml", toml_dumps(table).encode()), 3.0))
            entries.append((f"{name}.json", (".json", json.dumps(table).encode()), 1.0))

        def mutate(rng, payload):
            suffix, data = payload
            out, log = _child(rng, data, suffix[1:], dump_for(suffix))
            return (suffix, out), log

        def run(payload, index):
            suffix, data = payload
            return reader_harness.run_config(data, suffix, folder, cli=index % 10 == 0)

        def fresh(index):
            name, suffix, data, log = reader_harness.config_mutant(seed, index)
            return f"{name}{suffix}", (suffix, data), log

        target = Target("config", entries, mutate, run, fresh, size=lambda p: len(p[1]))
    else:
        entries = [(n, d, float(reader_harness.PROFILE_WEIGHTS[n]))
                 for n, d in sorted(reader_harness.profile_seeds().items())]

        def mutate(rng, data):
            return _child(rng, data, "json", lambda t: json.dumps(t).encode())

        def fresh(index):
            return reader_harness.profile_mutant(seed, index)

        target = Target("profile", entries, mutate,
                        lambda data, index: reader_harness.run_profile(data, folder), fresh)
    return target


def write_crashes(target: Target, crashes: dict, folder: str) -> list[str]:
    """Write each crashing payload to `folder` (ONNX: a sub-folder with model.onnx and its files)."""
    os.makedirs(folder, exist_ok=True)
    written = []
    for index, payload in sorted(crashes.items()):
        if target.name == "onnx":
            sub = os.path.join(folder, f"mutant-{index}")
            os.makedirs(sub, exist_ok=True)
            for file, content in payload.files.items():
                with open(os.path.join(sub, file), "wb") as f:
                    f.write(content)
            path, data = os.path.join(sub, "model.onnx"), payload.serialize()
        elif target.name == "config":
            path, data = os.path.join(folder, f"mutant-{index}{payload[0]}"), payload[1]
        else:
            path, data = os.path.join(folder, f"mutant-{index}.{'npub' if target.name == 'npub' else 'json'}"), payload
        with open(path, "wb") as f:
            f.write(data)
        written.append(path)
    return written
