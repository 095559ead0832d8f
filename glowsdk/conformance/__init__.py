"""Conformance: the primitive suite, the ONNX node tests and the light model zoo, against any backend."""
