"""Device DRAM as a real allocator: a sorted free list, first- or best-fit, coalescing on free.

Blocks are aligned to `alignment` bytes (the loader uses the DMA burst size, so a relocated
network keeps the DRAM timing it was compiled with). Fragmentation is visible in `stats()`:
1 - largest hole / free bytes, 0 when the free space is one hole. A request larger than every
hole fails with a message telling a full device from a fragmented one.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from isa.config import format_size

from .errors import FirmwareError, OutOfDeviceMemory

POLICIES = ("first-fit", "best-fit")


@dataclass(frozen=True)
class Block:
    """An allocated range [address, address + size) and who owns it."""

    address: int
    size: int
    owner: str

    @property
    def end(self) -> int:
        return self.address + self.size


@dataclass(frozen=True)
class AllocatorStats:
    """Capacity, use and fragmentation of one device's DRAM."""

    capacity: int
    used: int
    free: int
    largest_hole: int
    holes: int
    blocks: int

    @property
    def fragmentation(self) -> float:
        return 0.0 if not self.free else 1.0 - self.largest_hole / self.free


class DramAllocator:
    """Manages [0, capacity) of device DRAM."""

    def __init__(self, capacity: int, alignment: int = 64, policy: str = "first-fit") -> None:
        if policy not in POLICIES:
            raise FirmwareError(f"unknown allocation policy '{policy}' (known: {', '.join(POLICIES)})")
        if alignment < 1 or alignment & (alignment - 1):
            raise FirmwareError(f"allocation alignment {alignment} is not a power of two")
        self.capacity = capacity - capacity % alignment
        self.alignment = alignment
        self.policy = policy
        self._holes: list[tuple[int, int]] = [(0, self.capacity)] if self.capacity else []
        """(address, size) of every free range, ascending by address, never adjacent (always coalesced)."""
        self._blocks: dict[int, Block] = {}

    def rounded(self, size: int) -> int:
        """The bytes a request of `size` really takes (at least one aligned unit)."""
        return max(self.alignment, -(-size // self.alignment) * self.alignment)

    def allocate(self, size: int, owner: str) -> Block:
        """A block of at least `size` bytes; OutOfDeviceMemory if no hole holds it."""
        need = self.rounded(size)
        fits = [i for i, (_, hole) in enumerate(self._holes) if hole >= need]
        if not fits:
            stats = self.stats()
            why = ("fragmented: the largest hole is " + format_size(stats.largest_hole)
                   if stats.free >= need else "full")
            raise OutOfDeviceMemory(f"{owner}: needs {format_size(need)} of device DRAM, {format_size(stats.free)} "
                                    f"of {format_size(self.capacity)} are free ({why})")
        at = fits[0] if self.policy == "first-fit" else min(fits, key=lambda i: self._holes[i][1])
        address, hole = self._holes[at]
        if hole == need:
            del self._holes[at]
        else:
            self._holes[at] = (address + need, hole - need)
        block = Block(address, need, owner)
        self._blocks[address] = block
        return block

    def free(self, block: Block) -> None:
        """Return `block`, merging it with the holes on either side."""
        if self._blocks.get(block.address) != block:
            raise FirmwareError(f"{block.owner}: block at 0x{block.address:x} is not allocated")
        del self._blocks[block.address]
        at = bisect.bisect(self._holes, (block.address, 0))
        start, end = block.address, block.end
        if at < len(self._holes) and self._holes[at][0] == end:
            end += self._holes.pop(at)[1]
        if at > 0 and sum(self._holes[at - 1]) == start:
            at -= 1
            start = self._holes.pop(at)[0]
        self._holes.insert(at, (start, end - start))

    def holes(self) -> tuple[tuple[int, int], ...]:
        """The free list as (address, size) pairs: equal to its starting value once everything is freed."""
        return tuple(self._holes)

    def stats(self) -> AllocatorStats:
        free = sum(size for _, size in self._holes)
        return AllocatorStats(self.capacity, self.capacity - free, free,
                              max((size for _, size in self._holes), default=0), len(self._holes), len(self._blocks))
