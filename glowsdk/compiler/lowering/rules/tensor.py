"""Lowering rules of the tensor node kinds."""
