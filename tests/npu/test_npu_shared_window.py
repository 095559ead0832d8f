"""The load engine's transfers share the DRAM's request window with the store engine's (step_cost.shared_loads).

An engine runs its transfers one after another, each paying the request latency once; both engines' requests share
the controller's window of `dram_max_outstanding` requests in flight and its bus (sim/dram.py). A residual
operand's or a result's channel block of a wider tensor moves as one short request per pixel, each holding a
window slot for a latency, so beside a store of such requests a load takes longer than alone. resnet50's stage-3
projection on server (512 -> 1024 channels, 14 x 14, a fused residual add) tiled 64 output channels at a time keeps
its load engine so busy that its next row tile's input rows find no room: the tiler now costs that wait and takes
128 channels (the whole network 1,551,173 -> 1,547,073 cycles).
"""
from __future__ import annotations

import numpy as np

from glowsdk.backends.npu.step_cost import ConvShape, Pitches, dram_runs, image_runs, shared_loads, transfer_cycles
from glowsdk.backends.npu.tiling import choose_tiling, estimate
from isa import PRESETS
from sim.dram import Dram


def _engines(config, loads: list[np.ndarray], stores: list[np.ndarray]) -> int:
    """When the load engine's last transfer completes, both engines starting at cycle 0, as sim/machine.py's
    `_transfer` drives the shared controller: each transfer's requests committed a window at a time once a slot is
    free (of two engines ready together, the one that waited longer first), the engine's next transfer once its last
    request has completed."""
    dram, window = Dram(config), config.dram_max_outstanding
    queues = {"load": [list(t) for t in loads], "store": [list(t) for t in stores]}
    ready = {"load": 0, "store": 0}
    done = {"load": 0, "store": 0}
    at = {"load": 0, "store": 0}
    turns = {"load": 0, "store": 0}
    while any(queues.values()):
        engine = min((e for e in queues if queues[e]), key=lambda e: (dram.earliest_issue(ready[e]), turns[e]))
        turns[engine] += 1
        sizes = queues[engine][0]
        group = np.array(sizes[at[engine]:at[engine] + window], np.int64)
        now = dram.earliest_issue(ready[engine])
        last_issue, done[engine] = dram.commit(group, now, engine == "store")
        ready[engine] = last_issue + 1
        at[engine] += len(group)
        if at[engine] == len(sizes):
            queues[engine].pop(0)
            at[engine] = 0
            ready[engine] = done[engine]
    return done["load"]


def test_a_load_beside_a_store_of_short_requests_takes_the_window_they_share():
    config = PRESETS["server"]  # 64 B a cycle, latency 100, 32 requests in flight, 256 B bursts
    block = np.full(128, 256, np.int64)  # a 32 KB weight block: 128 bursts
    pixels = np.full(112, 64, np.int64)  # 8 x 14 pixels of a 64-channel block of a 1024-channel tensor
    simulated = _engines(config, [block, pixels], [pixels])
    weights, operand = dram_runs(1, 32768, 0, config), dram_runs(112, 64, 1024, config)
    assert weights == (128, 512) and operand == (112, 112)
    # alone, each load its latency then its bus or window time: 612 + 453.5 cycles
    alone = transfer_cycles(*weights, config) + transfer_cycles(*operand, config)
    # shared: two latencies, then the window both engines' 352 requests hold (each a latency and its data phase)
    shared = shared_loads([(1, weights), (1, operand)], operand, config)
    assert shared == 200 + (352 * 100 + 512 + 112 + 112) / 32
    assert abs(shared - simulated) <= 0.05 * simulated
    assert alone < 0.85 * simulated


def test_a_projection_whose_next_row_tile_finds_no_room_takes_wider_tiles():
    config = PRESETS["server"]
    shape = ConvShape(512, 14, 14, 1024, 14, 14)  # resnet50's stage-3 projection, its input a strided view
    chosen = choose_tiling(shape, config, 256, extra_buffers=1, vector_passes=2, pitches=Pitches(1024, 1024),
                           tables=(256,))
    # at 64 output channels a 64-byte residual load and store per pixel make each row tile load-bound
    assert chosen.n > 64
    narrow = estimate(shape, chosen.rows, 64, chosen.c, config, 1, 2, Pitches(1024, 1024))[1]
    assert narrow > chosen.cycles


def test_a_gated_projection_reads_channel_blocks_wide_enough_that_the_bus_not_the_window_paces_them():
    """EfficientNet-B0's gated 1 x 1 240 -> 80 on 14 x 14 (default preset) reads its input in channel blocks of a
    240-channel tensor, one run a pixel. At 32 channels each of a step's 196 runs is a 32-byte request holding a
    window slot for the latency: the load takes longer than its bytes on the bus, and at least that long whatever
    else the DRAM does. Costed so, 64-channel blocks win (in the simulator the network is 1,780 cycles faster)."""
    config = PRESETS["default"]
    shape, pitches = ConvShape(240, 14, 14, 80, 14, 14), Pitches(240, 80)
    chosen = choose_tiling(shape, config, 256, input_passes=1, pitches=pitches, reserved_acc=480, tables=(240,))
    assert chosen.c > 32
    block = dram_runs(*image_runs(14, 14, 32, 240, 32), config)
    assert transfer_cycles(*block, config) > config.dram_latency_cycles + block[1]  # (paced by the window)
