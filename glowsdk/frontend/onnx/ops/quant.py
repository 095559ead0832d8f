"""Converters of the ONNX quant ops."""
