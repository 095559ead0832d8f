"""What the hand-blocked kernels need to know about the host: vector width, registers, caches.

The micro-kernels (gemm.py) are written on explicit LLVM vector types, so their
shape is chosen here from the features LLVM reports for this CPU: 16 float lanes
and 32 vector registers with AVX-512, 8 lanes and 16 registers with AVX/AVX2, 4
lanes otherwise (SSE2 on any x86-64, NEON with 32 registers on AArch64). LLVM
legalises any vector type on any target, so a host without these features still
gets correct (narrower) code. Cache sizes come from Linux sysfs where present,
else typical values; they only steer blocking, never correctness.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

from ..jit import host_cpu

CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
DEFAULT_L1, DEFAULT_L2 = 32 * 1024, 1024 * 1024


@dataclass(frozen=True)
class VectorTarget:
    """The float32 SIMD shape of the host and the register tile of the GEMM micro-kernel."""

    lanes: int
    registers: int
    l1_bytes: int
    l2_bytes: int

    @property
    def tile(self) -> tuple[int, int]:
        """(rows MR, vectors NV) of the C tile kept in registers: MR * NV accumulators plus NV
        vectors of B and one broadcast of A must fit the register file."""
        if self.registers >= 32:
            return 8, 3
        return 4, 2


def _cache_bytes(level: int, default: int) -> int:
    """The size of this CPU's level-`level` data (or unified) cache, from sysfs."""
    if not os.path.isdir(CACHE_DIR):
        return default
    for entry in sorted(os.listdir(CACHE_DIR)):
        path = os.path.join(CACHE_DIR, entry)
        try:
            with open(os.path.join(path, "level")) as f:
                found = int(f.read())
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if found == level and kind in ("Data", "Unified") and text[:-1].isdigit():
            scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1], 1)
            return int(text[:-1]) * scale
    return default


@lru_cache(maxsize=1)
def host_vectors() -> VectorTarget:
    """The host's vector shape, from LLVM's feature string for this CPU."""
    features = set(host_cpu()[1].split(","))
    if "+avx512f" in features:
        lanes, registers = 16, 32
    elif "+avx" in features:
        lanes, registers = 8, 16
    elif "+neon" in features:
        lanes, registers = 4, 32
    else:
        lanes, registers = 4, 16
    return VectorTarget(lanes, registers, _cache_bytes(1, DEFAULT_L1), _cache_bytes(2, DEFAULT_L2))
