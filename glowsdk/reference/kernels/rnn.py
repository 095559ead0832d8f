"""Reference kernels of the rnn node kinds."""
