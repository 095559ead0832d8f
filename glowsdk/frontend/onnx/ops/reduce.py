"""Converters of the ONNX reduce ops."""
