"""reduce node kinds."""
