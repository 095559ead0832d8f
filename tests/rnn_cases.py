"""Test helper: one seeded random LSTM/GRU/RNN node with the optional inputs a test asks for."""
from __future__ import annotations

import numpy as np
from onnx import helper

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
INPUTS = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]


def recurrent_node(op, *, seq, batch, size, hidden, present, lengths, layout, dtype, seed, attrs):
    """(node, arrays by input name, output names): `present` names the optional inputs used,
    `lengths` the sequence_lens (None for none); weights are scaled to keep states moderate."""
    rng = np.random.default_rng(seed)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    gates = GATES[op]
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    arrays = {
        "X": rng.standard_normal((seq, batch, size) if layout == 0 else (batch, seq, size)),
        "W": rng.standard_normal((dirs, gates * hidden, size)) * 0.5,
        "R": rng.standard_normal((dirs, gates * hidden, hidden)) * 0.5,
        "B": rng.standard_normal((dirs, 2 * gates * hidden)) * 0.5,
        "initial_h": rng.standard_normal(state), "initial_c": rng.standard_normal(state),
        "P": rng.standard_normal((dirs, 3 * hidden)),
    }
    arrays = {n: a.astype(dtype) for n, a in arrays.items()}
    if lengths is not None:
        arrays["sequence_lens"] = np.asarray(lengths, np.int32)
    wanted = {"X", "W", "R", *present} | ({"sequence_lens"} if lengths is not None else set())
    names = [n if n in wanted else "" for n in INPUTS[:8 if op == "LSTM" else 6]]
    while names[-1] == "":
        names.pop()
    outputs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    if layout:
        attrs = dict(attrs, layout=layout)
    node = helper.make_node(op, names, outputs, hidden_size=hidden, **attrs)
    return node, {n: arrays[n] for n in names if n}, outputs
