"""Declaring a node kind: `define_node` turns its record (spec.py) into a `Node` subclass with named
accessors and registers it in `NODE_KINDS`. It sits apart from the records because its classes derive from
`Node`, and node.py builds records itself (the storage kinds'): records, `Node`, then the kinds, each
importing only what comes before it."""
from __future__ import annotations

from typing import Any, Sequence

from .node import Node
from .spec import NODE_KINDS, Attr, NodeSpec, Operand, TypeRule, VerifyRule, operands


def define_node(name: str, operands_text: str, *, results: str = "result",
                attrs: Sequence[Attr] = (), infer: TypeRule, verify: VerifyRule | None = None,
                doc: str, family: str) -> type[Node]:
    """Declare a node kind and return its generated class.

    `results` is a space-separated list of result names; a single name ending
    in `*` means the type rule decides how many results there are.
    """
    if name in NODE_KINDS:
        raise ValueError(f"node kind {name} is declared twice")
    result_names = tuple(results.split())
    variadic_results = len(result_names) == 1 and result_names[0].endswith("*")
    if variadic_results:
        result_names = (result_names[0][:-1],)
    spec = NodeSpec(name, operands(operands_text), result_names, tuple(attrs), infer, verify,
                    doc.strip(), family, variadic_results)
    reserved = set(dir(Node))
    clashes = [o.name for o in spec.operands if o.name in reserved] + \
        [a.name for a in spec.attrs if a.name in reserved]
    if clashes:
        raise ValueError(f"{name}: operand/attribute names {clashes} would hide Node members")
    namespace: dict[str, Any] = {"spec": spec, "__doc__": spec.doc, "__slots__": ()}
    for index, operand in enumerate(spec.operands):
        namespace[operand.name] = _operand_property(index, operand)
    for attr in spec.attrs:
        if attr.name in namespace:
            raise ValueError(f"{name}: attribute '{attr.name}' clashes with an operand")
        namespace[attr.name] = property(lambda self, _n=attr.name: self.attrs[_n], doc=attr.doc)
    cls = type(name, (Node,), namespace)
    NODE_KINDS[name] = cls
    return cls


def _operand_property(index: int, operand: Operand) -> property:
    if operand.variadic:
        return property(lambda self: self.inputs[index:], doc=f"variadic operand {operand.name}")
    return property(lambda self: self.inputs[index], doc=f"operand {operand.name}")
