"""The reference-NPU backend. Not registered as a target until it emits binaries."""
