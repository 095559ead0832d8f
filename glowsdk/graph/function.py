"""Module and Function: who owns which nodes (paper 3.2).

A Module owns storage (Constants and Placeholders) and Functions; a Function
owns its nodes in a list whose order is a valid schedule. Network outputs are
`Save` nodes writing into output Placeholders, as in Glow.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import GraphError
from ..names import fresh_name
from .node import Constant, Node, NodeValue, Origin, Placeholder, Storage
from .nodes.core import Save
from .types import Type


class Module:
    """Owns storage and functions; hands out names unique within the module."""

    def __init__(self) -> None:
        self.constants: dict[str, Constant] = {}
        self.placeholders: dict[str, Placeholder] = {}
        self.functions: dict[str, Function] = {}
        self._names: set[str] = set()
        self._reserved: set[str] = set()
        self.output_names: dict[str, str] = {}
        """Output placeholder -> the model's name for that output, where the two differ: an ONNX graph output
        that is also a graph input (an identity pass-through) cannot share the input placeholder's name."""

    def reserve_names(self, names: Iterable[str]) -> None:
        """Keep `names` for placeholders created later (network outputs keep their names)."""
        self._reserved.update(names)

    def unique_name(self, base: str, storage: bool = False) -> str:
        """`base` suffixed with a number if taken; reserved names go to storage only."""
        base = base or "v"
        if storage and base in self._reserved and base not in self._names:
            self._reserved.discard(base)
            self._names.add(base)
            return base
        name = fresh_name(base, self._names, self._reserved)
        self._names.add(name)
        return name

    def create_constant(self, name: str, value: np.ndarray, type_: Type | None = None) -> Constant:
        const = Constant(self.unique_name(name, storage=True), value, type_)
        self.constants[const.name] = const
        return const

    def create_placeholder(self, name: str, type_: Type, is_output: bool = False) -> Placeholder:
        ph = Placeholder(self.unique_name(name, storage=True), type_, is_output)
        self.placeholders[ph.name] = ph
        return ph

    def create_function(self, name: str = "main") -> "Function":
        fn = Function(self.unique_name(name), self)
        self.functions[fn.name] = fn
        return fn

    def erase_unused_storage(self) -> None:
        """Drop constants no function uses (input placeholders are part of the interface)."""
        for name in [n for n, c in self.constants.items() if not c.users]:
            del self.constants[name]
            self._names.discard(name)

    def release_constant_data(self) -> None:
        """Let go of every constant's value (each becomes None), as Glow strips a compiled module: for a
        module nobody reads again whose compile holds the data in a form of its own (the pipeline's lowered
        copy, once a backend's program has the weights), so a network's folded weights are not held twice."""
        for constant in self.constants.values():
            constant.value = None

    def verify(self) -> None:
        for fn in self.functions.values():
            fn.verify()

    def clone(self) -> "Module":
        """An independent copy (constant arrays are shared: they are read-only)."""
        copy = Module()
        copy._names = set(self._names)
        copy._reserved = set(self._reserved)
        copy.output_names = dict(self.output_names)
        mapping: dict[int, Node] = {}
        for const in self.constants.values():
            mapping[id(const)] = copy.constants[const.name] = Constant(const.name, const.value, const.type)
        for ph in self.placeholders.values():
            mapping[id(ph)] = copy.placeholders[ph.name] = Placeholder(ph.name, ph.type, ph.is_output)
        for fn in self.functions.values():
            new_fn = copy.functions[fn.name] = Function(fn.name, copy)
            for node in fn.nodes:
                inputs = [None if v is None else NodeValue(mapping[id(v.node)], v.index) for v in node.inputs]
                twin = type(node)(node.name, inputs, dict(node.attrs))
                twin.types = list(node.types)
                twin.origin = node.origin
                twin.function = new_fn
                new_fn.nodes.append(twin)
                mapping[id(node)] = twin
                for value in twin.present_inputs():
                    value.node.users[twin] = None
        return copy


class Function:
    """A list of nodes in schedule order, plus the operations that keep it well-formed."""

    def __init__(self, name: str, module: Module) -> None:
        self.name = name
        self.module = module
        self.nodes: list[Node] = []
        self._anchor: Node | None = None
        self._origin: Origin | None = None

    @contextmanager
    def inserting_before(self, anchor: Node) -> Iterator[None]:
        """Within the block, `create` places new nodes just before `anchor` (a rewrite's home)."""
        saved, self._anchor = self._anchor, anchor
        try:
            yield
        finally:
            self._anchor = saved

    @contextmanager
    def from_origin(self, origin: Origin | None) -> Iterator[None]:
        """Within the block, `create` marks new nodes as coming from `origin` (the importer's model node)."""
        saved, self._origin = self._origin, origin
        try:
            yield
        finally:
            self._origin = saved

    # -- building -------------------------------------------------------------------------
    def create(self, kind: type[Node], inputs: Sequence[NodeValue | None], name: str | None = None,
               **attrs: Any) -> Node:
        """Create a node of `kind`, infer and check its types, and append it."""
        try:
            normalised = kind.spec.normalise_attrs(attrs)
        except ValueError as err:
            raise GraphError(f"node '{name or kind.spec.name}': {err}") from None
        node = kind(self.module.unique_name(name or kind.spec.name.lower()), inputs, normalised)
        node.check_operands()
        for value in node.present_inputs():
            self._check_owned(node, value)
        node.types = node.infer_types()
        if node.spec.verify is not None:
            node.spec.verify(node)
        node.function = self
        node.origin = self._origin or (self._anchor.origin if self._anchor is not None else None)
        if self._anchor is not None and self._anchor.function is self:
            self.nodes.insert(self.nodes.index(self._anchor), node)
        else:
            self.nodes.append(node)
        for value in node.present_inputs():
            value.node.users[node] = None
        return node

    def add(self, kind: type[Node], *inputs: NodeValue | None, name: str | None = None,
            **attrs: Any) -> NodeValue:
        """`create` for the common single-result case; returns the result value."""
        return self.create(kind, inputs, name, **attrs).result()

    def save(self, value: NodeValue, name: str) -> Placeholder:
        """Write `value` into a new output Placeholder called `name`."""
        output = self.module.create_placeholder(name, value.type, is_output=True)
        self.create(Save, [value, output.result()], name=f"save_{output.name}")
        return output

    # -- editing --------------------------------------------------------------------------
    def set_input(self, node: Node, index: int, value: NodeValue | None) -> None:
        old = node.inputs[index]
        node.inputs[index] = value
        if value is not None:
            value.node.users[node] = None
        if old is not None and not any(v is not None and v.node is old.node for v in node.inputs):
            old.node.users.pop(node, None)

    def replace_all_uses(self, old: NodeValue, new: NodeValue) -> None:
        """Make every user of `old` use `new` instead; the types must be equal."""
        if old.type != new.type:
            raise GraphError(f"cannot replace %{old.name}: {old.type} with %{new.name}: {new.type}")
        for user in list(old.node.users):
            for i, value in enumerate(user.inputs):
                if value == old:
                    self.set_input(user, i, new)

    def erase(self, node: Node) -> None:
        """Remove a node nobody uses."""
        if node.users:
            users = ", ".join(u.name for u in node.users)
            raise GraphError(f"cannot erase '{node.name}': still used by {users}")
        self.nodes.remove(node)
        for i in range(len(node.inputs)):
            self.set_input(node, i, None)
        node.function = None

    def erase_dead(self) -> int:
        """Erase nodes whose results nobody uses (Saves are the roots); returns how many."""
        erased = 0
        for node in reversed(list(self.nodes)):
            if not node.users and not isinstance(node, Save):
                self.erase(node)
                erased += 1
        return erased

    # -- queries --------------------------------------------------------------------------
    def input_placeholders(self) -> list[Placeholder]:
        """Placeholders this function reads, in module order."""
        used = {id(v.node) for n in self.nodes for v in n.present_inputs()}
        saved = {id(ph) for ph in self.output_placeholders()}
        return [ph for ph in self.module.placeholders.values() if id(ph) in used and id(ph) not in saved]

    def output_placeholders(self) -> list[Placeholder]:
        return [n.output.node for n in self.nodes if isinstance(n, Save)]

    def count_kinds(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.kind] = counts.get(node.kind, 0) + 1
        return dict(sorted(counts.items()))

    def topo_order(self) -> list[Node]:
        """The nodes in an order where producers precede users; GraphError on a cycle."""
        own = {id(n) for n in self.nodes}
        pending = {id(n): sum(1 for v in n.present_inputs() if id(v.node) in own) for n in self.nodes}
        ready = [n for n in self.nodes if pending[id(n)] == 0]
        order: list[Node] = []
        while ready:
            node = ready.pop()
            order.append(node)
            for user in node.users:
                if id(user) in own:
                    pending[id(user)] -= sum(1 for v in user.present_inputs() if v.node is node)
                    if pending[id(user)] == 0:
                        ready.append(user)
        if len(order) != len(self.nodes):
            stuck = next(n for n in self.nodes if pending[id(n)] > 0)
            raise GraphError(f"function '{self.name}' has a cycle through node '{stuck.name}'")
        position = {id(n): i for i, n in enumerate(self.nodes)}
        return sorted(order, key=lambda n: position[id(n)]) if self._is_scheduled(position) else order

    def _is_scheduled(self, position: dict[int, int]) -> bool:
        return all(position[id(v.node)] < position[id(n)] for n in self.nodes
                   for v in n.present_inputs() if id(v.node) in position)

    # -- verification ---------------------------------------------------------------------
    def verify(self) -> None:
        """Check every invariant; raise GraphError naming the first offending node."""
        self.topo_order()
        saved: dict[int, str] = {}
        for node in self.nodes:
            node.check_operands()
            for value in node.present_inputs():
                self._check_owned(node, value)
                if value.index >= len(value.node.types):
                    raise node.fail(f"uses result {value.index} of '{value.node.name}', which has "
                                    f"{len(value.node.types)} results")
                if node not in value.node.users:
                    raise node.fail(f"is missing from the users of '{value.node.name}'")
            inferred = node.infer_types()
            if inferred != node.types:
                shown = ", ".join(map(str, node.types))
                raise node.fail(f"declared type(s) {shown} but its operands give "
                                f"{', '.join(map(str, inferred))}")
            if node.spec.verify is not None:
                node.spec.verify(node)
            if isinstance(node, Save):
                target = node.output.node
                if id(target) in saved:
                    raise node.fail(f"output '{target.name}' is already saved by '{saved[id(target)]}'")
                saved[id(target)] = node.name

    def _check_owned(self, node: Node, value: NodeValue) -> None:
        producer = value.node
        if isinstance(producer, Storage):
            table = self.module.constants if isinstance(producer, Constant) else self.module.placeholders
            if table.get(producer.name) is not producer:
                raise node.fail(f"uses storage '{producer.name}' of another module")
        elif producer.function is not self:
            raise node.fail(f"uses '{producer.name}', which is not in function '{self.name}'")

    def __iter__(self) -> Iterable[Node]:
        return iter(self.nodes)

    def __len__(self) -> int:
        return len(self.nodes)
