"""The firmware runtime of the reference NPU: the code on the device's controller, run against the simulator.

`NpuDevice` is one device: it validates and loads `.npub` binaries (`loader`), keeps several
resident in device DRAM managed by a real allocator (`allocator`) and backed in host memory only
where allocated (`dram`), runs them on the simulator and reports device errors as structured
records (`errors`); `faults` injects real device faults for reliability tests. The host runtime
(`glowsdk.runtime`) drives one `NpuDevice` per device.
"""
from .allocator import AllocatorStats, Block, DramAllocator
from .device import DeviceRun, NpuDevice
from .dram import BackedDram
from .errors import (
           DeviceError,
           DeviceFault,
           ErrorKind,
           FirmwareError,
           LoadError,
           OutOfDeviceMemory,
)
from .faults import Injection
from .loader import LoadedNetwork

__all__ = ["AllocatorStats", "BackedDram", "Block", "DeviceError", "DeviceFault", "DeviceRun", "DramAllocator",
           "ErrorKind", "FirmwareError", "Injection", "LoadError", "LoadedNetwork", "NpuDevice", "OutOfDeviceMemory"]
