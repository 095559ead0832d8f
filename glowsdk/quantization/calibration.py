"""Calibration inputs for profiling: samples from a folder of .npy files, or random ones.

A folder holds either one `.npy` file per sample (a single-input model), or one
sub-folder per sample holding `NAME.npy` per input, where NAME is the input's
name with the characters a file name cannot hold replaced by '_' (as
`glowsdk run --output` names files). Samples are taken in sorted order.

Every file is checked before the first sample runs (only the .npy headers are
read), so a bad file fails at once in one line naming it; samples are then
loaded one at a time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..compiler.backend import TensorInfo
from ..errors import GlowError, InputError
from ..files import load_npy, safe_file_name
from ..graph.inputs import check_input
from ..graph.node import Placeholder
from ..zoo import random_inputs


@dataclass
class CalibrationSet:
    """A sized, re-iterable sequence of samples (input name -> array) with a description for the profile."""

    files: list[dict[str, str]] | None  # per sample, the file of each input (None: random samples)
    inputs: list[Placeholder]
    how: str
    count: int
    seed: int = 0

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        if self.files is None:
            infos = [TensorInfo(p.name, p.type) for p in self.inputs]
            seeds = np.random.SeedSequence(self.seed).generate_state(self.count)
            for seed in seeds:
                yield random_inputs(infos, int(seed))
            return
        by_name = {p.name: p for p in self.inputs}
        for sample in self.files:
            yield {name: _read(by_name[name], path, mmap=False) for name, path in sample.items()}

    def describe(self) -> dict:
        return {"count": self.count, "how": self.how}


def calibration_random(network, n: int, seed: int = 0) -> CalibrationSet:
    """`n` samples of seeded random inputs (float inputs standard normal, see `zoo.random_inputs`)."""
    if n < 1:
        raise GlowError(f"random calibration needs at least 1 sample, got {n}")
    return CalibrationSet(None, network.function.input_placeholders(), f"random inputs, seed {seed}", n, seed)


def calibration_from_dir(path: str | os.PathLike, network) -> CalibrationSet:
    """The samples in folder `path` (see the module docstring for its two layouts), all checked."""

    path = os.fspath(path)
    inputs = network.function.input_placeholders()
    if not os.path.isdir(path):
        raise GlowError(f"{path}: {'not a folder' if os.path.exists(path) else 'no such folder'} "
                        f"(--calibration wants a folder of samples)")
    entries = sorted(os.listdir(path))
    if not entries:
        raise GlowError(f"{path}: the calibration folder is empty")
    folders = [e for e in entries if os.path.isdir(os.path.join(path, e))]
    if folders and len(folders) != len(entries):
        stray = next(e for e in entries if e not in folders)
        raise GlowError(f"{os.path.join(path, stray)}: a file among per-sample folders "
                        f"(give either one .npy per sample or one folder per sample)")
    if folders:
        expected = {safe_file_name(p.name) + ".npy": p.name for p in inputs}
        samples = [_sample_folder(os.path.join(path, f), expected) for f in folders]
    else:
        if len(inputs) != 1:
            names = ", ".join(p.name for p in inputs)
            raise GlowError(f"{path}: holds one file per sample, but the model has {len(inputs)} inputs "
                            f"({names}): give one folder per sample holding NAME.npy per input")
        for e in entries:
            _check_npy_name(os.path.join(path, e))
        samples = [{inputs[0].name: os.path.join(path, e)} for e in entries]
    by_name = {p.name: p for p in inputs}
    for sample in samples:
        for name, file in sample.items():
            _read(by_name[name], file, mmap=True)
    return CalibrationSet(samples, inputs, f"folder {path}", len(samples))


def _sample_folder(folder: str, expected: dict[str, str]) -> dict[str, str]:
    files = sorted(os.listdir(folder))
    for f in files:
        full = os.path.join(folder, f)
        _check_npy_name(full)
        if f not in expected:
            raise GlowError(f"{full}: the model has no input named like this "
                            f"(expected {', '.join(sorted(expected))})")
    for f in sorted(expected):
        if f not in files:
            raise GlowError(f"{os.path.join(folder, f)}: missing (input '{expected[f]}')")
    return {expected[f]: os.path.join(folder, f) for f in files}


def _check_npy_name(path: str) -> None:
    if not path.endswith(".npy") or not os.path.isfile(path):
        raise GlowError(f"{path}: not a .npy file (a calibration folder holds only .npy files or sample folders)")


def _read(placeholder: Placeholder, path: str, mmap: bool) -> np.ndarray:
    """The array in `path` as the input's dtype; with `mmap`, checked without reading the data."""
    array = load_npy(path, "", mmap)
    try:
        # a zero-stride stand-in has the file's shape and dtype but costs no reading
        return check_input(placeholder, np.broadcast_to(np.zeros((), array.dtype), array.shape) if mmap else array)
    except InputError as err:
        raise GlowError(f"{path}: {err}") from None
