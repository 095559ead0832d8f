"""Lowering rules of the elementwise node kinds."""
