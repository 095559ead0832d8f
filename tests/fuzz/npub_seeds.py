"""Valid `.npub` files to mutate: the container tests' hand-written sample and small compiled networks.

Every seed is built for the `default` architecture preset, so an unmutated seed passes the
loader's configuration-hash check and a mutant reaches the deeper checks. Compiled seeds come
from small ONNX networks (tests/npu/npu_nets.py) quantized from a two-input random profile and
compiled for the NPU; squeezenet (a 1.3 MB file of 3,497 instructions) is the one real-size seed.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

from isa import PRESETS, config_hash
from isa.container import pack_npub

CONFIG = PRESETS["default"]

_TESTS = Path(__file__).resolve().parent.parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))


def _sample() -> bytes:
    from test_container import sample

    return pack_npub(sample(config_hash=config_hash(CONFIG)))


def _compiled(network) -> bytes:
    import glowsdk
    from glowsdk.quantization import (
        QuantizationConfig,
        calibration_random,
        collect_profile,
    )

    quant = QuantizationConfig(collect_profile(network, calibration_random(network, 2)))
    compiled = glowsdk.compile(network, "npu", quantization=quant, fallback=None, config="default").compiled
    return pack_npub(compiled.binary)


def _conv() -> bytes:
    from npu.npu_nets import NetBuilder

    b = NetBuilder((1, 8, 8, 8))
    return _compiled(b.network(b.conv(b.conv("x", 8, 16), 16, 8, relu=False)))


def _pool_gemm() -> bytes:
    from npu.npu_nets import NetBuilder

    b = NetBuilder((1, 4, 8, 8), seed=1)
    x = b.node("MaxPool", [b.conv("x", 4, 8, stride=2)], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Flatten", [x])
    return _compiled(b.network(b.node("Gemm", [x, b.weight((8, 32)), b.weight((8,))], transB=1)))


def _squeezenet() -> bytes:
    import glowsdk

    return _compiled(glowsdk.load("squeezenet", random_weights=0))


SEEDS = {"sample": _sample, "conv": _conv, "pool-gemm": _pool_gemm, "squeezenet": _squeezenet}
WEIGHTS = {"sample": 40, "conv": 30, "pool-gemm": 29, "squeezenet": 1}
"""How often each seed is picked (per cent): squeezenet takes ~150 ms a load, the others ~1 ms."""


@functools.cache
def seed_bytes(name: str) -> bytes:
    """The seed's file, built once per process."""
    return SEEDS[name]()
