"""Reference kernels of the resize node kinds."""
