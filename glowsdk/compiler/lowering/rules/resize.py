"""Lowering rules of the resize node kinds."""
