"""The high-level IR: a strongly-typed dataflow graph of declared node kinds (paper 3.2)."""
from . import nodes
from .function import Function, Module
from .node import Constant, Node, NodeValue, Placeholder, Storage
from .spec import NODE_KINDS, NodeSpec
from .types import ElemKind, Type

__all__ = ["Constant", "ElemKind", "Function", "Module", "NODE_KINDS", "Node", "NodeSpec", "NodeValue",
           "Placeholder", "Storage", "Type", "nodes"]
