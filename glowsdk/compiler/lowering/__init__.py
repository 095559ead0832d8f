"""Node lowering onto the primitive set, driven by the backend (paper 3.4): the set in `primitives`, one rule
per node kind in `rules/`, the driver (`driver.lower_function`) that applies them."""
