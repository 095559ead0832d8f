"""Front ends: model formats translated into the high-level IR."""
