"""Gradient rules by family; importing this package registers them all."""
from . import elementwise, nn, tensor  # noqa: F401  (registers the rules)
