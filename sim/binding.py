"""Run an `.npub` binary: place constants and inputs in DRAM per its plan, simulate, read the outputs.

The container's memory plan is absolute (vendor_guide/npub_format.md): the constants section goes
to the start of the constants region, each input tensor (dense, row-major) to its address, and
each output is read back from its address; the roofline workloads the metadata records go with the
run (isa/roofline.py). Inputs given as floats are quantized with the tensor table's scale and
offset (divided in float32, round half to even, saturated to the element type: bit-identical to the
interpreter's Quantize kernel); quantized outputs are dequantized to float32, others returned as stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from isa.config import PRESETS, ArchConfig, config_hash, resolve_config
from isa.container import NpuBinary, read_npub
from isa.npub_layout import ELEM_KINDS
from isa.origins import origins_from_metadata
from isa.roofline import from_metadata
from isa.sections import TensorInfo, float32_scale

from .errors import SimInputError
from .results import SimResult
from .simulator import simulate

DTYPES = {name: np.dtype(name).newbyteorder("<") for name, _ in ELEM_KINDS.values()}
"""The little-endian dtype of each element kind a tensor table names (isa/npub_layout.py: numpy's own names)."""


@dataclass
class BinaryRun:
    """A simulated binary: the run, its outputs by name, and the inputs that were generated."""

    result: SimResult
    outputs: dict[str, np.ndarray]
    generated: list[str]


def quantize(name: str, value: np.ndarray, tensor: TensorInfo) -> np.ndarray:
    """The bytes-ready array for input `name` bound to `tensor`: its shape checked, floats quantized."""
    dtype = DTYPES[tensor.elem]
    value = np.asarray(value)
    if value.shape != tensor.logical_shape:
        raise SimInputError(f"input '{name}': shape {list(value.shape)} does not match tensor '{tensor.name}' "
                            f"{list(tensor.logical_shape)}")
    if tensor.layout == "nhwc":  # the host lays an image out channels-innermost, as the device reads it
        value = value.transpose(0, 2, 3, 1)
    if value.dtype.kind not in "biuf":
        raise SimInputError(f"input '{name}': {value.dtype} data cannot feed tensor '{tensor.name}' of {tensor.elem}")
    if dtype.kind == "f":
        return np.ascontiguousarray(value.astype(dtype))
    info = np.iinfo(dtype)
    if value.dtype.kind == "f":
        if not tensor.scale:
            raise SimInputError(f"input '{name}': float data for tensor '{tensor.name}' of {tensor.elem}, which "
                                f"has no quantization scale; give {tensor.elem} data")
        if not float32_scale(tensor.scale):  # a TensorInfo built in code: the reader refuses these in files
            raise SimInputError(f"input '{name}': tensor '{tensor.name}' has quantization scale {tensor.scale!r}, "
                                f"0 or not finite once divided by in float32")
        if np.isnan(value).any():  # an infinity saturates (an attention mask's -inf is the lowest code)
            raise SimInputError(f"input '{name}': NaN cannot be quantized to {tensor.elem}")
        # As the interpreter's Quantize: the division in float32, then round half to even and saturate.
        with np.errstate(invalid="ignore", over="ignore"):
            scaled = np.rint(value.astype(np.float32) / np.float32(tensor.scale))
        quantized = scaled.astype(np.float64) + tensor.offset
        return np.ascontiguousarray(np.clip(quantized, info.min, info.max).astype(dtype))
    if value.size and (value.min() < info.min or value.max() > info.max):
        raise SimInputError(f"input '{name}': values {value.min()}..{value.max()} do not fit tensor "
                            f"'{tensor.name}' of {tensor.elem}")
    return np.ascontiguousarray(value.astype(dtype))


def dequantize(raw: bytes, tensor: TensorInfo) -> np.ndarray:
    """An output's stored bytes as an array of its shape, as float32 when it is quantized."""
    value = np.frombuffer(raw, DTYPES[tensor.elem], tensor.elements).reshape(tensor.shape)
    if tensor.layout == "nhwc":
        value = value.transpose(0, 3, 1, 2)
    if tensor.scale:
        return ((value.astype(np.float64) - tensor.offset) * tensor.scale).astype(np.float32)
    return value.copy()


def _random(tensor: TensorInfo, rng: np.random.Generator, bound: int | None = None) -> np.ndarray:
    """Seeded values of the tensor's type; indices (`bound` given) drawn within the table they pick from."""
    dtype = DTYPES[tensor.elem]
    if dtype.kind == "f":
        return rng.standard_normal(tensor.logical_shape).astype(dtype)
    if bound is not None:
        return rng.integers(0, bound, tensor.logical_shape, dtype=dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, tensor.logical_shape, dtype=dtype, endpoint=True)


def index_bounds(binary: NpuBinary) -> dict[int, int]:
    """Tensor index -> the fewest table rows a GATHER picks from with indices loaded out of that tensor (the
    last LOAD into the accumulator before each GATHER on the load engine brings its indices)."""
    bounds: dict[int, int] = {}
    last_acc_load = None
    for instr in binary.instructions:
        if instr.mnemonic == "LOAD" and instr.space == "acc":
            last_acc_load = instr.dram
        elif instr.mnemonic == "GATHER" and last_acc_load is not None:
            for k, t in enumerate(binary.tensors):
                if t.dram_address <= last_acc_load < t.dram_address + t.size_bytes:
                    bounds[k] = min(bounds.get(k, instr.rows), instr.rows)
    return bounds


def run_binary(binary: NpuBinary, config: ArchConfig, inputs: Mapping[str, np.ndarray], *, checked: bool = False,
               ideal_dram: bool = False, seed: int = 0, progress: Callable[[int, int], None] | None = None,
               array_model: str = "closed") -> BinaryRun:
    """Simulate `binary` (already read and validated for `config`) on the given inputs; missing inputs are
    filled with seeded random values of their element type (indices within the table they pick from) and
    listed in `generated`; `progress` as `simulate`'s."""
    unknown = sorted(set(inputs) - set(binary.bindings.inputs))
    if unknown:
        raise SimInputError(f"input '{unknown[0]}': the binary has no such input "
                            f"(inputs: {', '.join(binary.bindings.inputs) or 'none'})")
    rng = np.random.default_rng(seed)
    image: dict[int, bytes | np.ndarray] = {binary.plan.constants.base: binary.constants}
    generated = []
    bounds = index_bounds(binary) if set(binary.bindings.inputs) - set(inputs) else {}
    for name, index in binary.bindings.inputs.items():
        tensor = binary.tensors[index]
        if name in inputs:
            value = quantize(name, inputs[name], tensor)
        else:
            value = _random(tensor, rng, bounds.get(index))
            generated.append(name)
        image[tensor.dram_address] = value
    try:
        workloads = from_metadata(binary.metadata, len(binary.debug))
    except ValueError as err:
        raise SimInputError(str(err)) from None
    result = simulate(binary.instructions, config, dram=image, layers=binary.debug, workloads=workloads,
                      checked=checked, ideal_dram=ideal_dram, array_model=array_model, progress=progress)
    result.origins = origins_from_metadata(binary.metadata)
    result.weights = binary.plan.constants
    outputs = {}
    for name, index in binary.bindings.outputs.items():
        tensor = binary.tensors[index]
        outputs[name] = dequantize(result.memories.read_dram(tensor.dram_address,
                                                             tensor.elements * tensor.itemsize), tensor)
    return BinaryRun(result, outputs, generated)


def load_binary(path: str, config: str | None) -> tuple[NpuBinary, ArchConfig]:
    """Read and validate `path` for the configuration `config` names (a preset or a file), or, without one,
    for the preset whose hash the binary records; refuses a binary built for another machine."""
    if config is not None:
        machine = resolve_config(config)
        return read_npub(path, config=machine), machine
    recorded = read_npub(path).config_hash.hex()
    for machine in PRESETS.values():
        if config_hash(machine) == recorded:
            return read_npub(path, config=machine), machine
    raise SimInputError(f"{path}: built for architecture configuration {recorded[:16]}..., which is no preset "
                        f"({', '.join(PRESETS)}); give its configuration file with --config")
