"""resize node kinds."""
