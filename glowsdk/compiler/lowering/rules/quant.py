"""Lowering rules of the quant node kinds."""
