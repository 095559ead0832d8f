"""glowsdk: a graph-lowering ML compiler SDK for hardware vendors, after the Glow paper.

The public API is `load`, `compile` and `Session` (see glowsdk.api); the
layers, in the order data flows, are frontend -> graph -> compiler -> backends.
"""
from .api import CompiledNetwork, Network, Session, compile, load  # noqa: A004
from .errors import GlowError

__version__ = "0.1.0"
__all__ = ["CompiledNetwork", "GlowError", "Network", "Session", "compile", "load", "__version__"]
