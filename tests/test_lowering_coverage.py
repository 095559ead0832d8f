"""Every node kind is either a primitive or lowers; the interpreter declares only primitives."""
from glowsdk.backends import get_backend
from glowsdk.compiler.lowering.primitives import PRIMITIVES
from glowsdk.compiler.lowering.registry import LOWERINGS
from glowsdk.graph import NODE_KINDS

STRUCTURAL = {"Save"}


def test_every_kind_is_a_primitive_or_has_a_lowering_rule():
    stranded = [k for k in NODE_KINDS if k not in PRIMITIVES and k not in LOWERINGS and k not in STRUCTURAL]
    assert not stranded, f"node kinds with no way to reach a backend: {stranded}"


def test_interpreter_declares_exactly_the_primitive_set():
    assert set(get_backend("interpreter").primitives) == set(PRIMITIVES)


def test_primitive_set_is_small():
    families = {p.family for p in PRIMITIVES.values()}
    assert len(families) <= 14 and len(PRIMITIVES) < len(NODE_KINDS) / 2
