"""Tables from node kinds (or op names) to implementations, filled by decorators.

The reference kernels, the lowering rules and the ONNX converters are each one
such table: `@TABLE.register(Kind, ...)` adds an entry, a second registration of
the same key is an error, and lookups are plain dict reads.
"""
from __future__ import annotations

from typing import Callable, TypeVar

from .node import Node

F = TypeVar("F", bound=Callable)


class KindTable(dict):
    """A dict from kind name to implementation with a registering decorator."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.what = what

    def register(self, *keys: type[Node] | str) -> Callable[[F], F]:
        """Decorator: make `fn` the implementation of each node kind (or name) in `keys`."""

        def add(fn: F) -> F:
            for key in keys:
                name = key if isinstance(key, str) else key.spec.name
                if name in self:
                    raise ValueError(f"{self.what} for {name} is registered twice")
                self[name] = fn
            return fn

        return add
