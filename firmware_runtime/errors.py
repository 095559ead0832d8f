"""What the firmware reports: structured device errors, refused binaries, misuse of the device.

A device error is data first (`DeviceError`: kind, network, instruction index, message) so the
host runtime can decide on a retry by its kind; `DeviceFault` carries one as a GlowError, whose
message is the record's one line.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from glowsdk.errors import GlowError


class ErrorKind(str, Enum):
    """Why a run stopped on the device."""

    ILLEGAL_INSTRUCTION = "illegal-instruction"
    """An instruction the machine cannot execute as configured (a static fault)."""
    OUT_OF_BOUNDS = "out-of-bounds"
    """An access outside DRAM, the scratchpad or the accumulator."""
    FAULT = "fault"
    """Any other machine fault (an illegal dynamic value, a semaphore overflow)."""
    DEADLOCK = "deadlock"
    """Every unit waits while instructions remain."""
    TIMEOUT = "timeout"
    """The run took more cycles than the watchdog allows."""
    RACE = "race"
    """Two engines touched the same bytes unordered (checked mode only)."""


@dataclass(frozen=True)
class DeviceError:
    """One error reported by a device; `instruction` is -1 when no instruction is to blame."""

    kind: ErrorKind
    network: str
    instruction: int
    message: str
    device: str = ""

    def __str__(self) -> str:
        where = f" at instruction {self.instruction}" if self.instruction >= 0 else ""
        on = f" on {self.device}" if self.device else ""
        return f"device error ({self.kind.value}){on}, network '{self.network}'{where}: {self.message}"


class DeviceFault(GlowError):
    """A run failed on the device; `error` is the structured record."""

    def __init__(self, error: DeviceError) -> None:
        super().__init__(str(error))
        self.error = error


class LoadError(GlowError):
    """A binary the loader refused before anything ran (corrupt, wrong version or configuration)."""


class FirmwareError(GlowError):
    """A request the firmware cannot honour: unknown network, a name loaded twice, eviction while running."""


class OutOfDeviceMemory(FirmwareError):
    """No hole of device DRAM is large enough; the message says whether it is full or fragmented."""
