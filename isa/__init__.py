"""The reference NPU's machine description: configuration schema and instruction set."""
