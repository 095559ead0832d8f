"""The host runtime (paper 6): partition, provision and run networks over several devices.

`HostManager` is the facade; `partitioner`, `provisioner`, `executor` and `devices` are the
paper's Partitioner, Provisioner, Executor and DeviceManagers. Simulated NPUs are driven through
the firmware runtime (`firmware_runtime`); the CPU through the cpu backend or the interpreter.
"""
from .devices import CpuDeviceManager, DeviceManager, HeldDeviceManager, NpuDeviceManager, PartitionRun
from .executor import RequestFailed, Response
from .host import HostManager, QueueFull
from .partitioner import NetworkRefused, Partition, PartitionPlan
from .provisioner import Placement, Provisioner

__all__ = ["CpuDeviceManager", "DeviceManager", "HeldDeviceManager", "HostManager", "NetworkRefused", "NpuDeviceManager", "Partition",
           "PartitionPlan", "PartitionRun", "Placement", "Provisioner", "QueueFull", "RequestFailed", "Response"]
