"""Design-space exploration: models compiled and simulated over a grid of NPU configurations.

`grid` reads the grid file into validated points, `point` runs one (compile, simulate, measure),
`executors` runs many (processes here, or Ray tasks), `results` files their rows as they finish, and
`pareto` finds the configurations worth an architect's look.
"""
