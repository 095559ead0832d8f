"""The reference NPU's SimPy simulator: functional and timed execution of NPU binaries."""
