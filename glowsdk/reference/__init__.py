"""The reference evaluator: one numpy kernel per node kind, the golden model every backend is checked against."""
