"""Scratchpad placement: every buffer a layer puts in SRAM starts on a whole line.

The layers lay their buffers (tiles, weights, tables, accumulator rows) out back to back, each one
rounded up to a line of `LINE` bytes (or words, in the accumulator), so that a buffer never shares a
line with the next and the placements a layer computes for its tiling are the ones its instructions
use. Written once here so that every layer rounds the same way.
"""
from __future__ import annotations

LINE = 64
"""Bytes (scratchpad) or int32 words (accumulator) a buffer is rounded to."""


def align(size: int) -> int:
    """`size` rounded up to a whole number of lines: the room a buffer of `size` takes."""
    return -(-size // LINE) * LINE


def align_down(size: int) -> int:
    """`size` rounded down to a whole number of lines: the largest buffer that fits in `size`."""
    return size // LINE * LINE
