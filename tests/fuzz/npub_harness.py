"""Running one `.npub` mutant through the container reader and the firmware loader, and judging it.

Stages, each only if the one before accepted the file:

1. `read_npub(data)`: the container alone (header, table, CRCs, sections, instructions);
2. `NpuDevice.load` on the `default` preset (the reader again with the configuration: its hash,
   the plan against the DRAM, every access on the machine; then placement, relocation, the
   placed program checked again), then `unload`, after which the allocator's free list must be
   whole again;
3. for a small program (`RUN_INSTRUCTIONS` instructions and `RUN_DRAM` bytes of plan at most), a
   run on the simulator with zero inputs.

Verdicts are those of the ONNX harness (onnx_harness.py): ok, error (a one-line GlowError: the
reader's NpubError, the firmware's LoadError, FirmwareError and DeviceFault are all GlowErrors),
crash (any other exception, a GlowError spanning several lines, or a device whose DRAM is not
whole after unload), memory (MemoryError under the worker's address-space cap). The key of an
error is its stage and class; of a crash, the exception type and the innermost frame of the
SDK (isa/, firmware_runtime/, sim/, glowsdk/) that raised it.
"""
from __future__ import annotations

import os
import random
import traceback

import numpy as np

from firmware_runtime import NpuDevice
from glowsdk.errors import GlowError
from isa.container import read_npub

from .npub_mutations import mutate
from .npub_seeds import CONFIG, WEIGHTS, seed_bytes
from .onnx_harness import Outcome

RUN_INSTRUCTIONS = 256
RUN_DRAM = 1 << 20
_PACKAGES = ("isa", "firmware_runtime", "sim", "glowsdk")
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def root_cause(err: BaseException) -> str:
    """Exception type @ the innermost frame in the SDK's packages (or the innermost frame at all)."""
    frames = traceback.extract_tb(err.__traceback__)
    ours = [f for f in frames if os.path.relpath(f.filename, _ROOT).split(os.sep)[0] in _PACKAGES] or frames
    if not ours:
        return type(err).__name__
    f = ours[-1]
    return f"{type(err).__name__} @ {os.path.relpath(f.filename, _ROOT)}:{f.name}:{f.lineno}"


def _judge(stage: str, err: BaseException) -> Outcome:
    if isinstance(err, GlowError):
        message = str(err)
        if "\n" in message or "\r" in message or not message:
            return Outcome("crash", f"multi-line {root_cause(err)}", message[:300])
        return Outcome("error", f"{stage}: {type(err).__name__}", message)
    if isinstance(err, MemoryError):
        return Outcome("memory", root_cause(err), str(err)[:200])
    return Outcome("crash", root_cause(err), f"{type(err).__name__}: {err}"[:300])


def run_npub(data: bytes, run: bool = True) -> Outcome:
    """Read, load, unload and (small programs, when `run`) simulate one file."""
    stage = "read"
    try:
        binary = read_npub(data, name="m.npub")
        stage = "load"
        device = NpuDevice(CONFIG)
        holes = device.allocator.holes()
        device.load("m", data)
        small = len(binary.instructions) <= RUN_INSTRUCTIONS and binary.plan.dram_size <= RUN_DRAM
        if run and small:
            stage = "run"
            net = device.networks["m"]
            feeds = {name: np.zeros(t.logical_shape, np.float32) for name, t in net.inputs.items()}
            try:
                device.run("m", feeds)
            finally:
                device.unload("m")
        else:
            device.unload("m")
        if device.allocator.holes() != holes or device.dram.backed_bytes:
            return Outcome("crash", "device DRAM not whole after unload", str(device.allocator.holes()))
    except RecursionError as err:
        return Outcome("crash", root_cause(err), "recursion")
    except Exception as err:  # noqa: BLE001  (every non-GlowError is what the fuzzer looks for)
        return _judge(stage, err)
    return Outcome("ok", stage)


def mutant_for(seed: int, index: int) -> tuple[str, bytes, list[str]]:
    """Mutant number `index` of the run with `seed`: the same pair always gives the same file."""
    rng = random.Random(seed * 1_000_003 + index)
    names = sorted(WEIGHTS)
    name = rng.choices(names, [WEIGHTS[n] for n in names])[0]
    data, log = mutate(seed_bytes(name), rng, rng.choice([1, 1, 1, 2, 2, 3]))
    return name, data, log


def run_mutant(seed: int, index: int) -> Outcome:
    name, data, log = mutant_for(seed, index)
    outcome = run_npub(data)
    outcome.seed, outcome.log = name, tuple(log)
    return outcome
