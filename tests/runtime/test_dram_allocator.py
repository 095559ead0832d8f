"""The device DRAM allocator: placement policies, coalescing, fragmentation, refusals."""
from __future__ import annotations

import pytest

from firmware_runtime import DramAllocator, FirmwareError, OutOfDeviceMemory


def test_free_merges_with_neighbouring_holes_and_a_hole_is_reused():
    heap = DramAllocator(512, alignment=64)
    a, b, c, d = (heap.allocate(size, x) for size, x in ((128, "a"), (64, "b"), (64, "c"), (64, "d")))
    heap.free(a)   # hole 0..128
    heap.free(c)   # hole 192..256; the tail 320..512 is free too
    heap.free(d)   # merges with 192..256 and the tail: 192..512
    assert heap.holes() == ((0, 128), (192, 320))
    e = heap.allocate(100, "e")   # rounds up to 128: fits exactly in the first hole
    assert (e.address, e.size) == (0, 128)
    assert heap.holes() == ((192, 320),)
    heap.free(b)                  # 128..192 joins the hole after it
    assert heap.holes() == ((128, 384),)


def test_best_fit_prefers_the_tightest_hole():
    heap = DramAllocator(1024, alignment=64, policy="best-fit")
    blocks = [heap.allocate(64, str(i)) for i in range(8)]   # 0..512 used, 512..1024 free
    heap.free(blocks[1])                                      # 64-byte hole at 64
    assert heap.allocate(64, "x").address == 64               # not the big tail hole
    first = DramAllocator(1024, alignment=64, policy="first-fit")
    for i in range(8):
        first.allocate(64, str(i))
    assert first.allocate(64, "x").address == 512


def test_freeing_everything_coalesces_to_the_starting_state():
    heap = DramAllocator(4096, alignment=64)
    start = heap.holes()
    blocks = [heap.allocate(size, str(i)) for i, size in enumerate((100, 64, 300, 1, 640))]
    for block in blocks[::2] + blocks[1::2]:      # free out of order, so every merge case happens
        heap.free(block)
    assert heap.holes() == start
    assert heap.stats().used == 0 and heap.stats().fragmentation == 0.0


def test_fragmentation_is_visible_and_named_in_the_refusal():
    heap = DramAllocator(1024, alignment=64)
    blocks = [heap.allocate(128, str(i)) for i in range(8)]
    for block in blocks[::2]:
        heap.free(block)
    stats = heap.stats()
    assert (stats.free, stats.largest_hole, stats.holes) == (512, 128, 4)
    assert stats.fragmentation == pytest.approx(1 - 128 / 512)
    with pytest.raises(OutOfDeviceMemory, match="fragmented: the largest hole is 128 B"):
        heap.allocate(256, "big")
    with pytest.raises(OutOfDeviceMemory, match=r"\(full\)"):
        heap.allocate(1024, "huge")


def test_double_free_and_bad_parameters_are_refused():
    heap = DramAllocator(256, alignment=64)
    block = heap.allocate(64, "a")
    heap.free(block)
    with pytest.raises(FirmwareError, match="not allocated"):
        heap.free(block)
    with pytest.raises(FirmwareError, match="policy"):
        DramAllocator(256, policy="worst-fit")
    with pytest.raises(FirmwareError, match="power of two"):
        DramAllocator(256, alignment=48)
