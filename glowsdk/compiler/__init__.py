"""The compiler: graph in, compiled function out (paper 3.6); `pipeline.compile_function` runs it, `backend` is
the contract every target implements. Importing this package loads none of its modules."""
