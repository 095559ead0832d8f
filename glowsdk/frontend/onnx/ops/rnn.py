"""Converters of the ONNX rnn ops."""
