"""Lowering rules of the linalg node kinds."""
