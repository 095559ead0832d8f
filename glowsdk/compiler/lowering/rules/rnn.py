"""Lowering rules of the rnn node kinds."""
