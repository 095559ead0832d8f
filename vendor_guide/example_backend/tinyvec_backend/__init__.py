"""glowsdk backend for the imaginary TinyVec-1, the vendor guide's worked example.

`TinyVecBackend` is registered under the `glowsdk.backends` entry-point group
(pyproject.toml); `TinyVecDevice` plugs the chip into glowsdk's host runtime.
"""
from .backend import TinyVecBackend
from .host import TinyVecDevice, TinyVecHost

__all__ = ["TinyVecBackend", "TinyVecDevice", "TinyVecHost"]
