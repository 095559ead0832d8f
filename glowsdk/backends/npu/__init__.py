"""The reference-NPU backend: quantized graphs compiled to `.npub` binaries (isa/), run on the simulator (sim/)."""
from .backend import NpuBackend

__all__ = ["NpuBackend"]
