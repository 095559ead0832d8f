"""The TinyVec-1 in glowsdk's host runtime, with the host CPU running what the chip cannot.

glowsdk's `HostManager` partitions for its own NPU and the CPU only
(vendor_guide/runtime.md), so a plugin device composes the runtime's parts:

1. Partition. The network is optimised and lowered for tinyvec without the
   support check; each node goes to tinyvec when `is_op_supported` accepts it,
   else to the CPU. The runtime's partitioner (`by_support`, `cut`, `ordered`)
   turns that into a DAG of sub-networks whose borders travel as float32.
2. Provision. Each partition is compiled for its device (tinyvec, or the cpu
   backend with the interpreter as its fallback, as the runtime's provisioner
   does) and loaded on every device of its kind.
3. Run. The runtime's executor drives each request through the DAG, every
   partition on its device's worker thread, and reports the device time.
"""
from __future__ import annotations

from concurrent.futures import Future
from typing import Mapping, Sequence

import numpy as np

from glowsdk.compiler.lowering.driver import lower_function
from glowsdk.compiler.partition.cut import cut
from glowsdk.compiler.passes import GRAPH_OPTIMIZATION, POST_LOWERING, PassManager
from glowsdk.compiler.pipeline import compile_function
from glowsdk.errors import GlowError
from glowsdk.graph.function import Function
from glowsdk.graph.node import Storage
from glowsdk.graph.nodes.core import Save
from glowsdk.runtime import DeviceManager, HeldDeviceManager, PartitionPlan, PartitionRun, Placement
from glowsdk.runtime.executor import RequestRun
from glowsdk.runtime.partitioner import CPU, by_support, ordered
from glowsdk.runtime.provisioner import compile_host

from .backend import TinyVecBackend

KIND = "tinyvec"


class TinyVecDevice(HeldDeviceManager):
    """One TinyVec-1 card: holds compiled partitions, runs one at a time, times them on the chip's clock."""

    kind = KIND

    def __init__(self, name: str = "tinyvec0", memory_bytes: int = 64 << 20) -> None:
        super().__init__(name, memory_bytes)

    def execute(self, key: str, inputs: Mapping[str, np.ndarray]) -> PartitionRun:
        compiled, _ = self.loaded[key]
        outputs = compiled.execute(inputs)
        return PartitionRun(outputs, compiled.seconds, self.name)


def lowered_for(function: Function, backend: TinyVecBackend) -> Function:
    """A copy of `function` optimised and lowered as compiling it for `backend` would, unsupported nodes kept."""
    graph = function.module.clone().functions[function.name]
    passes = PassManager()
    passes.run(GRAPH_OPTIMIZATION, graph)
    lower_function(graph, backend, check_support=False)
    passes.run(POST_LOWERING, graph)
    return graph


def partition(name: str, function: Function, backend: TinyVecBackend) -> PartitionPlan:
    """The network cut into tinyvec and CPU partitions, in a topological order."""
    graph = lowered_for(function, backend)
    kinds = {id(n): KIND if backend.is_op_supported(n) else CPU for n in graph.nodes
             if not isinstance(n, (Storage, Save))}
    assignment, part_kinds = by_support(graph, kinds)
    return PartitionPlan(name, graph, ordered(cut(graph, assignment, len(part_kinds)), part_kinds))


class TinyVecHost:
    """Networks on TinyVec-1 cards and the host CPU: add a network once, then run requests on it."""

    def __init__(self, devices: Sequence[DeviceManager]) -> None:
        self.devices = list(devices)
        self.backend = TinyVecBackend()
        self.networks: dict[str, tuple[PartitionPlan, Placement]] = {}

    def add_network(self, name: str, network: Function | object) -> PartitionPlan:
        function = network if isinstance(network, Function) else network.function
        plan = partition(name, function, self.backend)
        placement = Placement(name)
        for part in plan.partitions:
            if part.kind == KIND:
                part.artefact, part.backend = compile_function(part.function, self.backend), KIND
            else:
                part.artefact, part.backend = compile_host(part)
            devices = [d for d in self.devices if d.kind == part.kind and d.fits(part.artefact, 0)]
            if not devices:
                raise GlowError(f"network '{name}': partition {part.index} needs a {part.kind} device")
            for device in devices:
                key = f"{name}/p{part.index}"
                device.load(key, part.artefact, 0)
                placement.replicas.setdefault(part.index, []).append((device, key))
        self.networks[name] = (plan, placement)
        return plan

    def run(self, name: str, inputs: Mapping[str, np.ndarray]) -> Future:
        """A future of the runtime's `Response`: outputs, device seconds, the device of each partition."""
        plan, placement = self.networks[name]
        return RequestRun(plan, placement, inputs, retry=False, on_done=lambda: None).start()

    def close(self) -> None:
        for plan, placement in self.networks.values():
            for device, key in placement.copies():
                device.unload(key)
        self.networks.clear()
        for device in self.devices:
            device.shutdown()
