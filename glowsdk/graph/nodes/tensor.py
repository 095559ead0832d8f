"""tensor node kinds."""
