"""Converters of the ONNX resize ops."""
