"""Node lowering onto the primitive set, driven by the backend (paper 3.4)."""
from .driver import LoweringReport, lower_function
from .primitives import PRIMITIVES, Primitive, is_primitive

__all__ = ["LoweringReport", "PRIMITIVES", "Primitive", "is_primitive", "lower_function"]
