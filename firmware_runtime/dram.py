"""Device DRAM as the firmware sees it between runs, backed block by block.

A device's DRAM can be gigabytes (the server preset has 4 GiB) and a host can drive hundreds of
simulated devices, so nothing is backed for the configured size: each block the allocator hands
out gets its own zeroed array when it is placed, and loses it when it is freed. Host memory then
follows what the resident networks use, and a freed block reads as zeros when it is placed again.
Every access lies inside one backed block; anything else is a FirmwareError (a firmware bug).
"""
from __future__ import annotations

import bisect
import threading

import numpy as np

from .allocator import Block
from .errors import FirmwareError


class BackedDram:
    """The contents of the allocated blocks of one device's DRAM."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._starts: list[int] = []
        """Addresses of the backed blocks, ascending."""
        self._data: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()
        """A run reads and writes its blocks while another network is loaded or unloaded."""

    def back(self, block: Block) -> None:
        """Give a newly allocated block its (zeroed) bytes."""
        data = np.zeros(block.size, np.uint8)
        with self._lock:
            if block.address in self._data:
                raise FirmwareError(f"{self.name}: DRAM at 0x{block.address:x} is already backed")
            bisect.insort(self._starts, block.address)
            self._data[block.address] = data

    def drop(self, block: Block) -> None:
        """Forget a freed block's bytes."""
        with self._lock:
            if self._data.pop(block.address, None) is not None:
                self._starts.remove(block.address)

    def view(self, address: int, size: int) -> np.ndarray:
        """The bytes [address, address + size) as a writable view; they must lie in one backed block."""
        with self._lock:
            at = bisect.bisect_right(self._starts, address) - 1
            start = self._starts[at] if at >= 0 else -1
            data = self._data.get(start)
        if data is not None and address + size <= start + data.size:
            return data[address - start:address - start + size]
        raise FirmwareError(f"{self.name}: DRAM [0x{address:x}, 0x{address + size:x}) is not inside one "
                            f"allocated block")

    @property
    def backed_bytes(self) -> int:
        """Host memory holding device DRAM: the sizes of the allocated blocks."""
        with self._lock:
            return sum(data.size for data in self._data.values())
