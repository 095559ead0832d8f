"""Converters of the ONNX tensor ops."""
