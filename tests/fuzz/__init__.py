"""Structure-aware fuzzing of glowsdk's readers (the ONNX importer: `onnx_seeds`, `onnx_mutations`,
`onnx_harness`; driven by `bench/fuzz_onnx.py` and smoke-tested by `tests/test_import_fuzz.py`)."""
