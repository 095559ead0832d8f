"""The array's dataflows are a machine property: the compiler emits only those, the simulator faults others."""
from __future__ import annotations

import numpy as np
import pytest

import glowsdk
from glowsdk.quantization import QuantizationConfig, calibration_random, collect_profile
from glowsdk.reference.evaluator import evaluate
from isa import PRESETS, assemble
from isa.config import resolve_config
from sim.binding import run_binary
from sim.errors import Fault
from sim.simulator import simulate

from npu_nets import NetBuilder


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_compiler_honours_a_single_dataflow_array(tmp_path, dataflow: str) -> None:
    path = tmp_path / f"{dataflow}.toml"
    path.write_text(f'preset = "edge"\ndataflow = "{dataflow}"\n')
    b = NetBuilder((1, 8, 10, 10))
    network = b.network(b.conv(b.conv("x", 8, 24, 3, 1), 24, 40, 1, 0, relu=False))  # a 3x3, then a 1x1
    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    npu = glowsdk.compile(network, "npu", quantization=quant, config=str(path))
    flows = {i.values[0] for i in npu.compiled.binary.instructions if i.mnemonic == "CONFIG_MATMUL"}
    assert flows == {dataflow}
    inputs = network.random_inputs(1)
    got = run_binary(npu.compiled.binary, resolve_config(str(path)), inputs, checked=True).outputs
    for name, value in evaluate(npu.compiled.function, inputs).items():
        np.testing.assert_array_equal(got[name], value)


def test_both_lets_the_compiler_pick_per_matmul() -> None:
    assert PRESETS["edge"].dataflows == ("ws", "os") and PRESETS["edge"].reset_dataflow == "ws"


def test_simulator_faults_a_matmul_in_a_missing_dataflow() -> None:
    program = assemble("""
        CONFIG_MATMUL dataflow=os im2col=0 out_w=1 channels=1 kw=1 stride_h=1 stride_w=1 dil_h=1 dil_w=1 row_pitch=0 pixel_pitch=0
        MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=4 k=4 n=4 acc_mode=0
        END""")
    simulate(program, PRESETS["edge"])  # both dataflows: fine
    with pytest.raises(Fault, match=r"MATMUL in the os dataflow, but the array of architecture 'edge' is ws-only"):
        simulate(program, PRESETS["edge"].replace(dataflow="ws"))
