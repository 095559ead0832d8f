"""rnn node kinds."""
