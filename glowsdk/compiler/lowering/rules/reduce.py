"""Lowering rules of the reduce node kinds."""
