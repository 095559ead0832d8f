"""Lowering rules of the nn node kinds."""
