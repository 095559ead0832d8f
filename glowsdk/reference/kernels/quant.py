"""Reference kernels of the quant node kinds."""
