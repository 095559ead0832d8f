"""Reference kernels of the reduce node kinds."""
