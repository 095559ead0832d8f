"""Reference kernels of the tensor node kinds."""
