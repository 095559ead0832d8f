"""Sliding-window geometry shared by convolution and pooling, resolved at compile time.

Every window kernel works on 3 spatial dims: 1-d and 2-d windows get leading
dims of size 1 (kernel 1, stride 1, no padding). For each spatial dim, which
output positions a tap reaches inside the input (convolution loops taps
outside, outputs inside) and which taps an output position reaches (pooling
loops the other way) are computed here in Python and become constant tables,
so no kernel tests a bound per element and padding costs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SPATIAL = 3


@dataclass(frozen=True)
class Dim:
    """One spatial dim of a window op: input and output size, taps, stride, dilation, pads."""

    size: int
    out: int
    kernel: int
    stride: int
    dilation: int
    begin: int
    end: int

    def input_position(self, out: int, tap: int) -> int:
        return out * self.stride + tap * self.dilation - self.begin

    def outputs_of_tap(self, tap: int) -> tuple[int, int]:
        """The output positions [lo, hi) at which `tap` reads inside the input."""
        inside = [o for o in range(self.out) if 0 <= self.input_position(o, tap) < self.size]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)

    def taps_of_output(self, out: int) -> tuple[int, int]:
        """The taps [lo, hi) that read inside the input at output position `out`."""
        inside = [t for t in range(self.kernel) if 0 <= self.input_position(out, t) < self.size]
        return (inside[0], inside[-1] + 1) if inside else (0, 0)

    def counted_taps(self, out: int, include_pads: bool) -> int:
        """The taps an average divides by: inside the input, or inside it and its explicit pads."""
        if not include_pads:
            lo, hi = self.taps_of_output(out)
            return hi - lo
        return sum(1 for t in range(self.kernel) if -self.begin <= self.input_position(out, t) < self.size + self.end)


def window_dims(instr: Any) -> list[Dim]:
    """The SPATIAL dims of a Conv/pool instruction, size-1 dims first for a lower-rank window."""
    source, result = instr.inputs[0].type.shape, instr.types[0].shape
    k = len(source) - 2
    dims = [Dim(1, 1, 1, 1, 1, 0, 0) for _ in range(SPATIAL - k)]
    for i in range(k):
        dims.append(Dim(source[2 + i], result[2 + i], instr.kernel[i], instr.strides[i],
                        instr.dilations[i], instr.pads[i], instr.pads[k + i]))
    return dims


def spatial_strides(dims: list[Dim], attr: str) -> tuple[int, int, int]:
    """Row-major element strides of the 3 spatial dims of sizes `getattr(dim, attr)`."""
    sizes = [getattr(d, attr) for d in dims]
    return sizes[1] * sizes[2], sizes[2], 1
