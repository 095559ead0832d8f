"""Running one ONNX mutant through glowsdk and judging what happened.

The mutant is written to a folder (model.onnx plus its external-data files) and fed to
`glowsdk.load`; a network that loads and is small (under `COMPILE_BUDGET` elements in all its
values together) is also compiled for the interpreter, so compile time stays bounded without a
timeout. Verdicts:

- ok: loaded (and compiled, when small enough);
- error: a GlowError with a one-line message, what bad input must give;
- crash: any other exception, or a GlowError whose message spans several lines;
- memory: MemoryError, i.e. an allocation above the address-space limit the driver sets
  (`limit_memory`), so the model asked for memory no check refused first; or a network that
  loaded with a value above the size guard's limit (what compiling or running it would allocate).

A crash's root-cause key is the exception type and the innermost glowsdk frame raising it, so
one bug hit by a thousand mutants counts once.
"""
from __future__ import annotations

import math
import os
import random
import resource
import shutil
import traceback
from dataclasses import dataclass

import glowsdk
from glowsdk.errors import GlowError

from .onnx_mutations import mutate
from .onnx_seeds import seeds

DEFAULT_LIMIT = 1 << 31
"""The size guard's documented default (glowsdk/frontend/onnx/tensors.py); restated here, since the
harness judges glowsdk rather than asking it."""

COMPILE_BUDGET = 1 << 22
"""Networks whose values hold more elements than this in total are loaded, not compiled."""


@dataclass
class Outcome:
    verdict: str  # ok | error | crash | memory
    key: str = ""  # root cause: exception type @ innermost glowsdk frame
    message: str = ""
    seed: str = ""
    log: tuple[str, ...] = ()


def limit_memory(megabytes: int) -> None:
    """Cap this process's address space so a runaway allocation raises MemoryError."""
    limit = megabytes << 20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _root_cause(err: BaseException) -> str:
    """Exception type @ the innermost frame inside glowsdk (or the innermost frame at all)."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if f"{os.sep}glowsdk{os.sep}" in f.filename] or frames
    where = ours[-1] if ours else None
    at = f"{where.filename.split(os.sep + 'glowsdk' + os.sep)[-1]}:{where.name}:{where.lineno}" if where else "?"
    return f"{type(err).__name__} @ {at}"


def _values(net):
    """(kind, type) of every value of the loaded network: node results and constants."""
    for node in net.function.nodes:
        for value in node.results:
            yield node.kind, value.type
    for const in net.module.constants.values():
        yield "Constant", const.type


def _nbytes(type_) -> int:
    return math.prod(type_.shape) * type_.elem.itemsize  # exact, where numpy's int64 product wraps


def _total_elements(net) -> int:
    return sum(math.prod(t.shape) for _, t in _values(net))


def _oversized(net) -> Outcome | None:
    """A `memory` outcome if the network holds a value above the size guard's limit."""
    limit = int(os.environ.get("GLOWSDK_MAX_TENSOR_BYTES", "") or DEFAULT_LIMIT)
    for kind, type_ in _values(net):
        if _nbytes(type_) > limit:
            return Outcome("memory", f"accepted an oversized {kind}", f"{type_} above {limit} bytes")
    return None


def run_model(folder: str, data: bytes, files: dict[str, bytes], compile_: bool = True) -> Outcome:
    """Write the model (and its external files) into `folder`, load it, compile it if small."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    for name, content in files.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(content)
    path = os.path.join(folder, "model.onnx")
    with open(path, "wb") as f:
        f.write(data)
    try:
        net = glowsdk.load(path)
        oversized = _oversized(net)
        if oversized is not None:
            return oversized
        if compile_ and _total_elements(net) <= COMPILE_BUDGET:
            glowsdk.compile(net, "interpreter", fallback=None)
    except GlowError as err:
        message = str(err)
        if "\n" in message or "\r" in message or not message:
            return Outcome("crash", f"multi-line {type(err).__name__} @ {_root_cause(err).split(' @ ')[1]}",
                           message)
        return Outcome("error", type(err).__name__, message)
    except MemoryError as err:
        return Outcome("memory", _root_cause(err), str(err)[:200])
    except RecursionError as err:
        return Outcome("crash", _root_cause(err), "recursion")
    except Exception as err:  # noqa: BLE001  (every other exception is what the fuzzer looks for)
        return Outcome("crash", _root_cause(err), f"{type(err).__name__}: {err}"[:300])
    return Outcome("ok")


def mutant_for(seed: int, index: int):
    """Mutant number `index` of the run with `seed`: the same pair always gives the same mutant."""
    rng = random.Random(seed * 1_000_003 + index)
    corpus = seeds()
    name = rng.choice(sorted(corpus))
    return name, mutate(corpus[name], rng, rng.choice([1, 1, 1, 2, 2, 3]))


def run_mutant(seed: int, index: int, folder: str) -> Outcome:
    name, mutant = mutant_for(seed, index)
    outcome = run_model(folder, mutant.serialize(), mutant.files)
    outcome.seed, outcome.log = name, tuple(mutant.log)
    return outcome
