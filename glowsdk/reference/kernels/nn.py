"""Reference kernels of the nn node kinds."""
