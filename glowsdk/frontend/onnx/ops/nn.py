"""Converters of the ONNX nn ops."""
