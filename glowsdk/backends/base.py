"""What a backend is: the contract between the compiler and a device (paper 3.4, 3.6).

A backend receives a verified Function and returns a CompiledFunction that runs
it. Backends are found through the `glowsdk.backends` entry-point group, so a
vendor's separately installed package plugs in without editing glowsdk.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

import numpy as np

from ..graph.function import Function
from ..graph.node import Node
from ..graph.types import Type


@dataclass(frozen=True)
class TensorInfo:
    """A network input or output: its name and static type."""

    name: str
    type: Type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape


@dataclass
class CompileOptions:
    """Options every backend understands; `extra` carries backend-specific ones."""

    extra: dict[str, Any] = field(default_factory=dict)


class CompiledFunction(ABC):
    """A function compiled for one backend, ready to execute."""

    def __init__(self, function: Function) -> None:
        self.inputs = [TensorInfo(p.name, p.type) for p in function.input_placeholders()]
        self.outputs = [TensorInfo(p.name, p.type) for p in function.output_placeholders()]

    @abstractmethod
    def execute(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on named input arrays; return the outputs by name."""


class Backend(ABC):
    """Base class of every backend, built-in or a vendor's."""

    name: ClassVar[str]

    def is_op_supported(self, node: Node) -> bool:
        """Whether this backend can execute `node` as it is."""
        return True

    @abstractmethod
    def compile(self, function: Function, options: CompileOptions) -> CompiledFunction:
        """Compile a verified function for this backend."""
