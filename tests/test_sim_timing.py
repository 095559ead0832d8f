"""The simulator's timing against the datasheet: SCALE-Sim closed forms, DMA requests, overlap, accounts.

The expected figures are computed here from vendor_guide/npu_architecture.md's timing model (the
SCALE-Sim formulas, the DMA request rules as a plain loop per request), independently of `sim`.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa import PRESETS, assemble
from sim.simulator import simulate


def scale_sim_cycles(dataflow: str, p: int, k: int, n: int, r: int, c: int) -> int:
    if dataflow == "ws":
        return math.ceil(k / r) * math.ceil(n / c) * (2 * r + c + p - 2) - 1
    return math.ceil(p / r) * math.ceil(n / c) * (r + c + k - 2) - 1


def config_matmul(dataflow: str, im2col: int = 0, out_w: int = 1, channels: int = 1, kw: int = 1, stride: int = 1,
                  dilation: int = 1, row_pitch: int = 0, pixel_pitch: int = 0) -> str:
    """One CONFIG_MATMUL line of assembly."""
    return (f"CONFIG_MATMUL dataflow={dataflow} im2col={im2col} out_w={out_w} channels={channels} kw={kw} "
            f"stride_h={stride} stride_w={stride} dil_h={dilation} dil_w={dilation} row_pitch={row_pitch} "
            f"pixel_pitch={pixel_pitch}")


def duration(result, index: int) -> int:
    return int(result.timeline.end[index] - result.timeline.start[index])


SHAPES = [(128, 256, 64), (49, 1152, 128), (1, 1024, 200), (256, 27, 32), (3, 4000, 16), (100, 100, 100)]


@pytest.mark.parametrize("preset", ["edge", "default"])
@pytest.mark.parametrize("dataflow", ["ws", "os"])
@pytest.mark.parametrize("p, k, n", SHAPES)
def test_stall_free_matmul_matches_scale_sim(preset, dataflow, p, k, n):
    """With ideal DRAM the matrix engine's cycles, and the whole program's, are SCALE-Sim's within 5%."""
    config = PRESETS[preset]
    text = f"""
        CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes={k}
        LOAD dram=0x0 space=spad sram=0x0 planes=1 rows={p} cols=1 ; signal s1
        CONFIG_LOAD row_stride=0 plane_stride=0 col_stride=0 elem_bytes={n}
        LOAD dram=0x0 space=spad sram={p * k} planes=1 rows={k} cols=1 ; signal s1
        {config_matmul(dataflow)}
        MATMUL inp=0x0 wgt={p * k} acc=0x0 rows={p} k={k} n={n} acc_mode=0 ; wait s1x2 signal s2
        END ; wait s2
    """
    result = simulate(assemble(text), config, ideal_dram=True)
    expected = scale_sim_cycles(dataflow, p, k, n, config.array_rows, config.array_cols)
    assert duration(result, 5) == expected
    assert abs(result.cycles - expected) / expected < 0.05


@pytest.mark.parametrize("dataflow", ["ws", "os"])
def test_stall_free_convolution_matches_scale_sim(dataflow):
    """The datasheet's convolution tile (implicit im2col: P = 256, K = 288, N = 64) on the edge preset."""
    config = PRESETS["edge"]
    text = f"""
        {config_matmul(dataflow, 1, 16, 32, 3, row_pitch=576, pixel_pitch=32)}
        MATMUL inp=0x0 wgt=0x3000 acc=0x0 rows=256 k=288 n=64 acc_mode=0 ; signal s1
        END ; wait s1
    """
    result = simulate(assemble(text), config, ideal_dram=True)
    expected = scale_sim_cycles(dataflow, 256, 288, 64, 16, 16)
    assert duration(result, 1) == expected
    assert abs(result.cycles - expected) / expected < 0.05


def dma_reference(config, dram: int, planes, rows, cols, ps, rs, cs, elem, pad_bytes=0) -> int:
    """A transfer's cycles by the datasheet's rules, one request at a time, on an idle DRAM."""
    sizes, previous = [], None
    for p in range(planes):
        for r in range(rows):
            for c in range(cols):
                for e in range(elem):
                    byte = dram + p * ps + r * rs + c * cs + e
                    if previous is None or byte != previous + 1 or byte % config.dma_burst_bytes == 0:
                        sizes.append(0)
                    sizes[-1] += 1
                    previous = byte
    issued, done, bus = [], [], -1 << 40
    for k, size in enumerate(sizes):
        t = max(0, issued[-1] + 1 if issued else 0,
                done[k - config.dram_max_outstanding] if k >= config.dram_max_outstanding else 0)
        bus = max(t + config.dram_latency_cycles, bus) + -(-size // config.dram_bytes_per_cycle)
        issued.append(t)
        done.append(bus)
    return max(bus, -(-pad_bytes // config.dma_burst_bytes), 1)


SMALL = PRESETS["edge"].replace(name="small", dram_latency_cycles=20, dram_max_outstanding=3, dma_burst_bytes=16,
                                dram_bytes_per_cycle=4)


@pytest.mark.parametrize("config", [PRESETS["default"], SMALL], ids=["default", "small"])
@pytest.mark.parametrize("dram, planes, rows, cols, ps, rs, cs, elem, pads", [
    (0x1000, 1, 1, 1, 0, 0, 0, 64, 0),            # one request
    (0x1000, 1, 64, 1, 0, 256, 0, 256, 0),        # contiguous: bandwidth-bound
    (0x1003, 1, 3, 5, 0, 100, 9, 7, 0),           # strided, misaligned, elements crossing bursts
    (0x2000, 1, 16, 1, 0, 0, 0, 48, 0),           # row stride 0: the same bytes again
    (0x1000, 2, 4, 4, 4096, 64, 16, 16, 1),       # 3-D with padding
    (0x1000, 1, 1, 2, 0, 0, 1, 1, 2),             # padding outweighs the requests
])
def test_dma_timing_follows_the_request_model(config, dram, planes, rows, cols, ps, rs, cs, elem, pads):
    text = f"""
        CONFIG_LOAD row_stride={rs} plane_stride={ps} col_stride={cs} elem_bytes={elem}
        CONFIG_PAD pad_top={pads} pad_bottom={pads} pad_left={pads} pad_right={pads} pad_value=0
        LOAD dram={dram:#x} space=spad sram=0x0 planes={planes} rows={rows} cols={cols} ; signal s1
        CONFIG_STORE row_stride={rs} plane_stride={ps} col_stride={cs} elem_bytes={elem}
        STORE dram={dram + 0x100000:#x} space=spad sram=0x0 planes={planes} rows={rows} cols={cols} ; wait s1
        END
    """
    result = simulate(assemble(text), config)
    padded = planes * ((rows + 2 * pads) * (cols + 2 * pads) - rows * cols) * elem
    assert duration(result, 2) == dma_reference(config, dram, planes, rows, cols, ps, rs, cs, elem, padded)
    # The STORE writes the same box of DRAM (no padding) once the LOAD has completed.
    assert duration(result, 4) == dma_reference(config, dram + 0x100000, planes, rows, cols, ps, rs, cs, elem)


@settings(max_examples=60, deadline=None)
@given(offset=st.integers(0, 200), planes=st.integers(1, 3), rows=st.integers(1, 6), cols=st.integers(1, 6),
       ps=st.integers(0, 600), rs=st.integers(0, 120), cs=st.integers(0, 40), elem=st.integers(1, 40),
       window=st.integers(1, 5), latency=st.integers(1, 30), bandwidth=st.integers(1, 20))
def test_dma_timing_on_random_geometries_and_machines(offset, planes, rows, cols, ps, rs, cs, elem, window, latency,
                                                      bandwidth):
    config = SMALL.replace(dram_max_outstanding=window, dram_latency_cycles=latency, dram_bytes_per_cycle=bandwidth)
    text = f"""
        CONFIG_LOAD row_stride={rs} plane_stride={ps} col_stride={cs} elem_bytes={elem}
        LOAD dram={0x1000 + offset:#x} space=spad sram=0x0 planes={planes} rows={rows} cols={cols}
        END
    """
    result = simulate(assemble(text), config)
    assert duration(result, 1) == dma_reference(config, 0x1000 + offset, planes, rows, cols, ps, rs, cs, elem)


def test_concurrent_transfers_share_the_bandwidth():
    """A LOAD and a STORE of 64 KiB each at once: the bus carries 128 KiB, both slow down, stalls say why."""
    config = PRESETS["default"]
    text = """
        CONFIG_LOAD row_stride=4096 plane_stride=0 col_stride=0 elem_bytes=4096
        LOAD dram=0x0 space=spad sram=0x0 planes=1 rows=16 cols=1
        CONFIG_STORE row_stride=4096 plane_stride=0 col_stride=0 elem_bytes=4096
        STORE dram=0x100000 space=spad sram=0x10000 planes=1 rows=16 cols=1
        END
    """
    result = simulate(assemble(text), config)
    alone = dma_reference(config, 0, 1, 16, 1, 0, 4096, 0, 4096)
    assert result.cycles >= 2 * 65536 // config.dram_bytes_per_cycle
    assert duration(result, 1) > alone and duration(result, 3) > alone
    units = {row.unit: row for row in result.unit_rows()}
    assert units["load DMA"].stalls["dram_bandwidth"] + units["store DMA"].stalls["dram_bandwidth"] > alone // 2
    assert units["load DMA"].stalls["dram_latency"] >= config.dram_latency_cycles
    for row in units.values():
        assert row.busy + row.stalled + row.idle == result.cycles


def tiled_program(buffers: int, tiles: int) -> str:
    """Per tile: LOAD a 128 x 128 input, MATMUL it by resident weights; `buffers` input buffers."""
    lines = ["CONFIG_LOAD row_stride=4096 plane_stride=0 col_stride=0 elem_bytes=4096",
             "LOAD dram=0x400000 space=spad sram=0x40000 planes=1 rows=1 cols=1 ; signal s3",
             "CONFIG_LOAD row_stride=128 plane_stride=0 col_stride=0 elem_bytes=128",
             f"NOP ; signal s2x{buffers}", "NOP ; signal s4x2", "CONFIG_MATMUL dataflow=ws im2col=0 out_w=1 channels=1 "
             "kw=1 stride_h=1 stride_w=1 dil_h=1 dil_w=1 row_pitch=0 pixel_pitch=0 ; wait s3"]
    for t in range(tiles):
        b = t % buffers
        lines.append(f"LOAD dram={t * 0x4000:#x} space=spad sram={b * 0x4000:#x} planes=1 rows=128 cols=1 "
                     "; wait s2 signal s1")
        lines.append(f"MATMUL inp={b * 0x4000:#x} wgt=0x40000 acc={(t % 2) * 4096:#x} rows=128 k=128 n=32 "
                     "acc_mode=0 ; wait s1 signal s2")
    lines.append("END")
    return "\n".join(lines)


def test_double_buffering_overlaps_dma_and_compute():
    config = PRESETS["default"]
    image = {0: bytes(range(256)) * 1024}
    double = simulate(assemble(tiled_program(2, 12)), config, dram=image, checked=True)
    serial = simulate(assemble(tiled_program(1, 12)), config, dram=image, checked=True)
    compute = scale_sim_cycles("ws", 128, 128, 32, 32, 32)
    load = dma_reference(config, 0, 1, 128, 1, 0, 128, 0, 128)
    assert double.cycles < 0.75 * serial.cycles
    assert serial.cycles >= 12 * (compute + load)
    assert double.cycles < 12 * compute + 2 * load + 200
    np.testing.assert_array_equal(double.memories.acc, serial.memories.acc)


def test_vector_timing_and_unit_accounts():
    config = PRESETS["edge"]
    text = "\n".join([
        "VADDI dst_space=acc dst=0x0 src_space=spad src=0x0 count=1000 imm=0 ; signal s1",
        "CONFIG_POOL kh=3 kw=3 stride_h=2 stride_w=2 pad_top=1 pad_bottom=0 pad_left=1 pad_right=0 count_pad=0 "
        "pad_value=0",
        "POOL op=max dst=0x4000 src=0x0 height=8 width=8 channels=16",
        "MATMUL inp=0x0 wgt=0x0 acc=0x1000 rows=16 k=16 n=16 acc_mode=0 ; wait s1",
        "VADD_LUT dst=0x8000 src1=0x0 src2=0x100 count=700 offset=3",
        "END"])
    result = simulate(assemble(text), config)
    assert duration(result, 0) == config.vector_pipeline_cycles + math.ceil(1000 / config.vector_lanes)
    assert duration(result, 2) == config.vector_pipeline_cycles + math.ceil(4 * 4 * 16 * 9 / config.vector_lanes)
    units = {row.unit: row for row in result.unit_rows()}
    assert duration(result, 4) == config.vector_pipeline_cycles + math.ceil(700 / config.vector_lanes)
    assert units["vector"].busy == duration(result, 0) + 1 + duration(result, 2) + duration(result, 4)
    assert units["matrix"].stalls["semaphore"] > 0
    assert units["dispatcher"].instructions == 6


def test_a_full_queue_stalls_the_dispatcher():
    config = PRESETS["edge"].replace(queue_depth=2)
    text = "\n".join(["MATMUL inp=0x0 wgt=0x0 acc=0x0 rows=64 k=64 n=16 acc_mode=0"] * 5
                     + ["VADDI dst_space=spad dst=0x0 src_space=spad src=0x0 count=16 imm=1", "END"])
    result = simulate(assemble(text), config)
    units = {row.unit: row for row in result.unit_rows()}
    assert units["dispatcher"].stalls["queue_full"] > 0
    # The VADDI waited behind the MATMULs in dispatch: it starts only once the matrix queue had room.
    assert result.timeline.start[5] > result.timeline.end[1]
