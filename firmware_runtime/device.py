"""The firmware of one simulated NPU: resident networks, device DRAM, runs, and device errors.

`load` validates a binary against the device's configuration, places each region of its memory
plan in a block of device DRAM, relocates it there and copies its constants in. `run` binds the
inputs (quantized as the interpreter's Quantize does) into the network's input block, runs the
command queues on the simulator until END, and reads the outputs back. The device runs one network
at a time; `unload` of the network that is running is refused, and frees its blocks otherwise.

A simulator error becomes a `DeviceFault` whose `DeviceError` names the kind, the network and the
instruction. The watchdog bounds a run's cycles: the simulator cannot be pre-empted, so a run over
budget completes on the host but its results are discarded and TIMEOUT is reported, as a device
whose watchdog reset it would.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from isa.config import PRESETS, ArchConfig, format_size
from isa.npub_layout import DRAM_ALIGNMENT, RegionKind
from isa.program import ProgramError, program_extents
from sim.binding import dequantize, quantize
from sim.errors import DeadlockError, Fault, RaceError, SimError, SimInputError
from sim.simulator import simulate

from .allocator import AllocatorStats, Block, DramAllocator
from .dram import BackedDram
from .errors import DeviceError, DeviceFault, ErrorKind, FirmwareError
from .faults import Injection, inject
from .loader import (
    LoadedNetwork,
    check_placed,
    region_deltas,
    relocate_program,
    relocate_tensors,
    validate,
)


@dataclass(frozen=True)
class DeviceRun:
    """One completed run: the outputs by name and the simulated time it took."""

    outputs: dict[str, np.ndarray]
    cycles: int
    seconds: float


class NpuDevice:
    """One simulated NPU and the firmware managing it.

    `heap_bytes` is the DRAM the firmware hands to networks (the whole DRAM by default; a smaller
    heap models a device with less memory, or one whose firmware reserves the rest).
    """

    def __init__(self, config: ArchConfig | None = None, *, name: str = "npu0", heap_bytes: int | None = None,
                 policy: str = "first-fit", watchdog_cycles: int | None = None, checked: bool = False) -> None:
        self.config = config or PRESETS["default"]
        self.name = name
        heap = self.config.dram_bytes if heap_bytes is None else heap_bytes
        if not 0 < heap <= self.config.dram_bytes:
            raise FirmwareError(f"{name}: heap of {heap} bytes is outside 1..{self.config.dram_bytes} (the DRAM)")
        self.allocator = DramAllocator(heap, max(DRAM_ALIGNMENT, self.config.dma_burst_bytes), policy)
        self.dram = BackedDram(name)
        """Device DRAM as the firmware sees it between runs: only the allocated blocks are backed."""
        self.watchdog_cycles = watchdog_cycles
        self.checked = checked
        self.networks: dict[str, LoadedNetwork] = {}
        self.running: str | None = None
        self._lock = threading.Lock()
        self._armed: list[Injection] = []

    # -- loading ------------------------------------------------------------------------------
    def load(self, name: str, data: bytes) -> LoadedNetwork:
        """Validate, place, relocate and make resident the binary `data` under `name`."""
        binary = validate(data, self.config, name)
        with self._lock:
            if name in self.networks:
                raise FirmwareError(f"{self.name}: a network named '{name}' is already loaded")
            blocks: dict[RegionKind, Block] = {}
            try:
                for kind, region in binary.plan.regions().items():
                    blocks[kind] = self.allocator.allocate(region.size, f"{self.name}: network '{name}' "
                                                                        f"{kind.label} region")
                program = relocate_program(binary, region_deltas(binary.plan, blocks))
                check_placed(name, program, self.config, blocks)
                for block in blocks.values():
                    self.dram.back(block)
            except BaseException:
                for block in blocks.values():
                    self.dram.drop(block)
                    self.allocator.free(block)
                raise
            tensors = relocate_tensors(binary, region_deltas(binary.plan, blocks))
            constants = blocks[RegionKind.CONSTANTS]
            self.dram.view(constants.address, len(binary.constants))[:] = np.frombuffer(binary.constants, np.uint8)
            loaded = LoadedNetwork(name, binary, blocks, program, tensors)
            self.networks[name] = loaded
            return loaded

    def unload(self, name: str) -> None:
        """Free a resident network's DRAM; refused while it runs."""
        with self._lock:
            if name not in self.networks:
                raise FirmwareError(f"{self.name}: no network named '{name}' is loaded")
            if self.running == name:
                raise FirmwareError(f"{self.name}: cannot evict network '{name}' while it runs")
            for block in self.networks.pop(name).blocks.values():
                self.dram.drop(block)
                self.allocator.free(block)

    def fits(self, data_bytes: int) -> bool:
        """Whether one more block of `data_bytes` would fit now (a quick check; `load` is the real one)."""
        return self.allocator.stats().largest_hole >= self.allocator.rounded(data_bytes)

    def stats(self) -> AllocatorStats:
        return self.allocator.stats()

    def arm(self, injection: Injection) -> None:
        """Make the next run fail as `injection` says (fault injection for reliability tests)."""
        with self._lock:
            self._armed.append(injection)

    # -- running ------------------------------------------------------------------------------
    def run(self, name: str, inputs: Mapping[str, np.ndarray]) -> DeviceRun:
        """Bind `inputs`, run the network to completion, return its outputs; DeviceFault on a device error."""
        with self._lock:
            net = self.networks.get(name)
            if net is None:
                raise FirmwareError(f"{self.name}: no network named '{name}' is loaded "
                                    f"(resident: {', '.join(self.networks) or 'none'})")
            if self.running is not None:
                raise FirmwareError(f"{self.name}: busy running '{self.running}'")
            self.running = name
            injection = self._armed.pop(0) if self._armed else None
        try:
            return self._run(net, inputs, injection)
        finally:
            with self._lock:
                self.running = None

    def _run(self, net: LoadedNetwork, inputs: Mapping[str, np.ndarray], injection: Injection | None) -> DeviceRun:
        missing = sorted(set(net.inputs) - set(inputs))
        if missing:
            raise FirmwareError(f"{self.name}: network '{net.name}' needs input '{missing[0]}'")
        for key, tensor in net.inputs.items():
            try:
                value = quantize(key, inputs[key], tensor)
            except SimInputError as err:
                raise FirmwareError(f"{self.name}: network '{net.name}': {err}") from None
            self.dram.view(tensor.dram_address, value.nbytes)[:] = value.view(np.uint8).ravel()
        read = (net.blocks[RegionKind.CONSTANTS], net.blocks[RegionKind.INPUTS])
        image = {b.address: self.dram.view(b.address, b.size) for b in read}
        program, watchdog = net.program, self.watchdog_cycles
        if injection is not None:
            program, watchdog = inject(injection, program, self.config, watchdog)
        try:
            result = simulate(program, self.config, dram=image, layers=net.binary.debug, checked=self.checked)
        except SimError as err:
            raise DeviceFault(self._error(net, program, err)) from None
        if watchdog is not None and result.cycles > watchdog:
            raise DeviceFault(DeviceError(ErrorKind.TIMEOUT, net.name, -1, f"the run took {result.cycles} cycles, "
                                          f"over the watchdog's {watchdog}", self.name))
        for kind in (RegionKind.ACTIVATIONS, RegionKind.OUTPUTS):
            block = net.blocks[kind]
            self.dram.view(block.address, block.size)[:] = np.frombuffer(
                result.memories.read_dram(block.address, block.size), np.uint8)
        outputs = {key: dequantize(self.dram.view(t.dram_address, t.size_bytes).tobytes(), t)
                   for key, t in net.outputs.items()}
        return DeviceRun(outputs, result.cycles, result.seconds)

    def _error(self, net: LoadedNetwork, program: list, err: SimError) -> DeviceError:
        """The structured record of a simulator error."""
        if isinstance(err, DeadlockError):
            kind = ErrorKind.DEADLOCK
        elif isinstance(err, RaceError):
            kind = ErrorKind.RACE
        elif isinstance(err, Fault):
            kind = self._fault_kind(program, err.index)
        else:
            kind = ErrorKind.FAULT
        return DeviceError(kind, net.name, err.index, str(err), self.name)

    def _fault_kind(self, program: list, index: int) -> ErrorKind:
        """A fault at `index`: out-of-bounds when the instruction's extents leave a memory, illegal when it has
        no legal extents at all, a plain fault otherwise."""
        if index < 0:
            return ErrorKind.FAULT
        try:
            found = program_extents(program[:index + 1], self.config)[index]
        except ProgramError:
            return ErrorKind.ILLEGAL_INSTRUCTION
        sizes = {"dram": self.config.dram_bytes, "spad": self.config.scratchpad_bytes,
                 "acc": self.config.accumulator_bytes // 4}
        return ErrorKind.OUT_OF_BOUNDS if any(e.stop > sizes[e.memory] for e in found) else ErrorKind.FAULT

    def describe(self) -> str:
        s = self.stats()
        return (f"{self.name}: {len(self.networks)} network(s), {format_size(s.used)} used of "
                f"{format_size(s.capacity)}, {s.holes} hole(s), fragmentation {s.fragmentation:.0%}")

