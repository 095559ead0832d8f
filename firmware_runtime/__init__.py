"""The device-side runtime that validates, loads and runs NPU binaries."""
