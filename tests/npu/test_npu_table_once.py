"""A layer whose tiles all look up one table loads it once, in its first tile (epilogue.table_loaded_once); one that
switches between two tables loads each in every tile. Checked mode and bit-exact: a tile that found another table
in the vector engine would give other bytes."""
from __future__ import annotations

from glowsdk.backends.npu.epilogue import AddTensor
from glowsdk.backends.npu.gemm import GemmLayer

from npu_nets import NetBuilder
from test_npu_accplace import bottlenecks
from test_npu_backend import assert_bit_exact


def counts(npu, mnemonics: tuple[str, ...]) -> list[tuple[int, int]]:
    """For each convolution with a residual addition: its LUT_LOADs and its instructions of `mnemonics`."""
    program, debug = npu.compiled.binary.instructions, npu.compiled.binary.debug
    out = []
    for k, layer in enumerate(npu.compiled.layers):
        if isinstance(layer.body, GemmLayer) and any(isinstance(op, AddTensor) for op in layer.body.epilogue):
            part = program[debug[k].start:debug[k].stop]
            out.append((sum(i.mnemonic == "LUT_LOAD" for i in part), sum(i.mnemonic in mnemonics for i in part)))
    return out


def test_the_residual_addition_s_one_table_is_loaded_by_the_first_tile_only():
    """(Add then Relu: REQUANT, then LUT_VADD_LUT with the Relu as its table, in each of the 8 tiles.)"""
    npu = assert_bit_exact(bottlenecks(28, 1), config="server")
    assert counts(npu, ("LUT_VADD_LUT",)) == [(1, 8)]


def test_an_activation_table_and_the_addition_s_are_loaded_by_every_tile():
    """(Sigmoid, Add, Relu: REQUANT_LUT with the Sigmoid's table, then LUT_VADD_LUT with the Relu's.)"""
    b = NetBuilder((1, 64, 28, 28))
    x = b.conv("x", 64, 64, 1, 0, relu=False)
    y = b.node("Sigmoid", [b.conv(x, 64, 64, 1, 0, relu=False)])
    npu = assert_bit_exact(b.network(b.conv(b.node("Relu", [b.node("Add", [y, x])]), 64, 64, 1, 0, relu=False)),
                           config="server")
    [(loads, tiles)] = counts(npu, ("REQUANT_LUT",))
    assert tiles > 1 and loads == 2 * tiles
