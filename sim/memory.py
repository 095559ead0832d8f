"""The machine's memories as numpy arrays: DRAM bytes, the int8 scratchpad, the int32 accumulator.

DRAM is as large as the configuration says (up to 4 GiB), but only the part a program can touch
is backed by an array: the highest address any instruction's extent or the initial image reaches.
Addresses are checked against the configured sizes before any access (`check`), so the backing
never has to grow and an access outside a memory is a fault, never a silent clip.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from isa.config import ArchConfig, format_size
from isa.behaviour import Extent

from .errors import SimInputError

DramImage = Mapping[int, bytes | bytearray | np.ndarray]
"""Initial DRAM contents: start address -> bytes."""


def _raw(data: bytes | bytearray | np.ndarray) -> np.ndarray:
    """Bytes, or an array's bytes in memory order, as uint8."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).view(np.uint8).ravel()
    return np.frombuffer(bytes(data), np.uint8)


class Datapath:
    """The machine state instructions act on (`isa.behaviour.State`): the memories' arrays plus the one piece
    of engine state that is data, not registers: the vector LUT."""

    def __init__(self, memories: Memories) -> None:
        self.dram, self.spad, self.acc = memories.dram, memories.spad, memories.acc
        self.lut = (np.arange(256) - 128).astype(np.int8)


class Memories:
    """DRAM (backed up to `dram_backing` bytes), scratchpad and accumulator of one machine."""

    def __init__(self, config: ArchConfig, dram_backing: int, image: DramImage | None = None) -> None:
        self.config = config
        self.sizes = {"dram": config.dram_bytes, "spad": config.scratchpad_bytes, "acc": config.accumulator_bytes // 4}
        image = {at: _raw(data) for at, data in (image or {}).items()}
        backing = max([dram_backing] + [at + data.size for at, data in image.items()])
        if backing > config.dram_bytes:
            raise SimInputError(f"the DRAM image reaches byte {backing}, beyond the {format_size(config.dram_bytes)} "
                             f"DRAM of architecture '{config.name}'")
        self.dram = np.zeros(backing, np.uint8)
        self.spad = np.zeros(config.scratchpad_bytes, np.int8)
        self.acc = np.zeros(config.accumulator_bytes // 4, np.int32)
        for at, data in image.items():
            self.dram[at:at + data.size] = data

    def check(self, extent: Extent) -> str | None:
        """Why `extent` is outside its memory, or None."""
        size = self.sizes[extent.memory]
        if extent.stop <= size:
            return None
        return (f"{extent}, beyond the {format_size(size * (4 if extent.memory == 'acc' else 1))} "
                f"{extent.memory} of architecture '{self.config.name}'")

    def sram(self, space: str) -> np.ndarray:
        """The scratchpad (int8 per byte) or the accumulator (int32 per word)."""
        return self.spad if space == "spad" else self.acc

    def read(self, space: str, start: int, count: int) -> np.ndarray:
        """`count` elements of an SRAM as int64 (sign-extended), a copy."""
        return self.sram(space)[start:start + count].astype(np.int64)

    def read_dram(self, address: int, size: int) -> bytes:
        """DRAM bytes; those beyond the backing were never written and read as zero."""
        data = self.dram[address:address + size].tobytes()
        return data + bytes(size - len(data))
