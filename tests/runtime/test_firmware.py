"""The firmware runtime against the simulator: loading, residency, relocation, refusals, device errors."""
from __future__ import annotations

from functools import cache
from itertools import pairwise

import numpy as np
import pytest
from nets import digits, quantization

import glowsdk
from firmware_runtime import (
    DeviceFault,
    ErrorKind,
    FirmwareError,
    Injection,
    LoadError,
    NpuDevice,
)
from glowsdk.reference.evaluator import evaluate
from isa.config import PRESETS
from isa.container import pack_npub
from isa.npub_layout import HEADER, MAGIC


@cache
def compiled():
    """The digits CNN and its NPU compilation."""
    network = digits()
    return network, glowsdk.compile(network, "npu", quantization=quantization(network)).compiled


def expect(seed: int) -> tuple[dict, dict]:
    network, npu = compiled()
    inputs = network.random_inputs(seed)
    return inputs, evaluate(npu.function, inputs)


def test_two_resident_networks_run_relocated_and_bit_exact():
    _, npu = compiled()
    device = NpuDevice(heap_bytes=1 << 20)
    start = device.allocator.holes()
    data = pack_npub(npu.binary)
    first, second = device.load("first", data), device.load("second", data)
    spans = sorted((b.address, b.end) for net in (first, second) for b in net.blocks.values())
    assert all(end <= nxt for (_, end), (nxt, _) in pairwise(spans))   # disjoint blocks
    assert min(b.address for b in second.blocks.values()) > 0                # really moved
    for seed, name in ((1, "first"), (2, "second"), (3, "first")):
        inputs, want = expect(seed)
        run = device.run(name, inputs)
        np.testing.assert_array_equal(run.outputs["logits"], want["logits"])
        assert run.cycles > 0 and run.seconds == pytest.approx(run.cycles / 1e9)
    device.unload("first")
    assert device.stats().holes == 2   # a hole where 'first' was, and the tail
    device.unload("second")
    assert device.allocator.holes() == start


class _Probe(dict):
    """Inputs that try to evict the running network while the firmware binds them."""

    def __init__(self, values: dict, device: NpuDevice) -> None:
        super().__init__(values)
        self.device, self.refusal = device, None

    def __getitem__(self, key):
        try:
            self.device.unload("net")
        except FirmwareError as err:
            self.refusal = str(err)
        return super().__getitem__(key)


def test_eviction_is_refused_while_the_network_runs():
    _, npu = compiled()
    device = NpuDevice(heap_bytes=1 << 20)
    device.load("net", pack_npub(npu.binary))
    inputs, want = expect(4)
    probe = _Probe(inputs, device)
    run = device.run("net", probe)
    assert probe.refusal == "npu0: cannot evict network 'net' while it runs"
    np.testing.assert_array_equal(run.outputs["logits"], want["logits"])
    device.unload("net")
    assert device.stats().used == 0


def _corrupt(data: bytes, how: str) -> bytes:
    raw = bytearray(data)
    if how == "magic":
        raw[0] ^= 0xFF
    elif how == "version":
        raw[HEADER.offsets["format_major"]] += 1
    elif how == "checksum":
        raw[-1] ^= 0x01   # the last byte belongs to the last section
    elif how == "truncated":
        raw = raw[:len(raw) - 10]
    return bytes(raw)


@pytest.mark.parametrize("how,message", [
    ("magic", f"not an NPU binary: starts with .*expected the magic {MAGIC.hex(' ')}"),
    ("version", r"format version 2\.\d+ is not supported"),
    ("checksum", r"section 'metadata', byte \d+: CRC-32 of bytes"),
    ("truncated", "truncated: the file has"),
])
def test_corrupted_binaries_are_refused_and_never_placed(how, message):
    _, npu = compiled()
    device = NpuDevice(heap_bytes=1 << 20)
    with pytest.raises(LoadError, match=f"refused to load 'bad': bad: .*{message}"):
        device.load("bad", _corrupt(pack_npub(npu.binary), how))
    assert device.networks == {} and device.stats().used == 0


def test_a_binary_for_another_configuration_is_refused():
    _, npu = compiled()
    device = NpuDevice(PRESETS["edge"])
    with pytest.raises(LoadError, match="built for architecture configuration .* but the configuration in use"):
        device.load("net", pack_npub(npu.binary))


@pytest.mark.parametrize("kind", [ErrorKind.OUT_OF_BOUNDS, ErrorKind.DEADLOCK, ErrorKind.TIMEOUT])
def test_injected_faults_are_structured_and_the_device_recovers(kind):
    _, npu = compiled()
    device = NpuDevice(heap_bytes=1 << 20)
    device.load("net", pack_npub(npu.binary))
    inputs, want = expect(5)
    device.arm(Injection(kind))
    with pytest.raises(DeviceFault) as caught:
        device.run("net", inputs)
    error = caught.value.error
    assert (error.kind, error.network, error.device) == (kind, "net", "npu0")
    program = device.networks["net"].program
    if kind is ErrorKind.OUT_OF_BOUNDS:
        assert program[error.instruction].mnemonic == "LOAD" and 0 < error.instruction < len(program) - 1
        assert "beyond the 2 GiB dram" in error.message
    elif kind is ErrorKind.DEADLOCK:
        assert error.instruction == len(program) - 1 and "deadlock" in error.message
    else:
        assert error.instruction == -1 and "over the watchdog's 1" in error.message
    assert device.running is None
    np.testing.assert_array_equal(device.run("net", inputs).outputs["logits"], want["logits"])


def test_out_of_memory_and_unknown_networks_are_refused():
    _, npu = compiled()
    device = NpuDevice(heap_bytes=3072)   # the constants fit, the activations do not
    with pytest.raises(FirmwareError, match="needs .* of device DRAM"):
        device.load("net", pack_npub(npu.binary))
    assert device.stats().used == 0    # the regions placed before the failure were freed
    with pytest.raises(FirmwareError, match="no network named 'ghost' is loaded"):
        device.run("ghost", {})
