"""Two layers at once: a max pool or an LRN runs beside a convolution, in step with its stores where it reads them.

Layers run one after another (emitter.py), so a layer that is vector-engine and DRAM work only (a max
pool, an LRN) leaves the array idle for all of its cycles, while a convolution next to it keeps the array
busy and leaves the vector engine mostly idle. Where neither reads or writes what the other writes
(an Inception module's pool branch and its 3x3 convolution both read the module's input), the pool
can run during the convolution: it takes the scratchpad above the convolution's buffers, semaphores
the convolution does not use, and its tiles are interleaved with the convolution's in program order,
spread over the convolution's tiles, so each engine's in-order queue alternates between the two.
One barrier closes the pair, waiting for both last STOREs.

A pool (or an LRN) may move to any convolution it can reach in the layer order without passing a layer whose
DRAM footprint meets its own (`Footprint`: the byte ranges each layer's LOADs read and STOREs
write), or to the convolution whose result it reads (its producer, the first layer it meets going
back): then each pool tile waits, on its loads, for the producer tiles that store the rows it reads,
which signal after their STOREs (`_follow`). Of the candidates, the one with the most estimated
cycles hosts it. The engines' configuration registers are restated wherever the stream passes from
one layer to the other, so every instruction runs with the registers it has when its layer runs
alone (`interleave`); the lookup table LUT_LOAD fills is not a register: every tile that uses it
loads it first.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from isa.config import ArchConfig
from isa.encoding import Instr, make_instr
from isa.program import extents, reset_registers, with_registers
from isa.schema import COUNT, Engine
from isa.table import INSTRUCTIONS
from sim.dram import profile
from sim.steps import ENGINES
from sim.timing import static_cycles

from ...errors import UnsupportedError
from .emitter import DONE
from .gemm import GemmLayer
from .handoff import HANDOFF
from .layers import Layer
from .lrn import LrnLayer
from .maxpool import SeparableMaxPoolLayer, separable
from .pipeline import PREFETCH, STORED
from .scratchpad import align

Ranges = tuple[tuple[int, int], ...]
MAX_COUNT = (1 << COUNT.width) - 1
"""The most tokens one instruction waits for."""
LAG = 2
"""Host tiles between the last one a rider tile reads and the rider tile in program order: the rider's wait then
holds up the host's loads only for tiles whose stores are due anyway."""


def _merged(ranges: list[tuple[int, int]]) -> Ranges:
    """Sorted, overlapping or touching ranges joined."""
    out: list[tuple[int, int]] = []
    for start, stop in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return tuple(out)


def _meet(a: Ranges, b: Ranges) -> bool:
    """Whether two sorted disjoint range lists share a byte."""
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i][0] < b[j][1] and b[j][0] < a[i][1]:
            return True
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return False


@dataclass(frozen=True)
class Footprint:
    """The DRAM a layer's transfers read and write (each transfer's whole box, gaps included)."""

    reads: Ranges
    writes: Ranges

    @staticmethod
    def of(instructions: list[Instr], config: ArchConfig) -> Footprint:
        reads, writes = [], []
        for instr, registers in with_registers(instructions, config):
            if instr.mnemonic in ("LOAD", "GATHER", "STORE"):
                for e in extents(instr, registers):
                    if e.memory == "dram":
                        (writes if e.write else reads).append((e.start, e.stop))
        return Footprint(_merged(reads), _merged(writes))

    def meets(self, other: Footprint) -> bool:
        """Whether the two layers' order matters: one writes what the other reads or writes."""
        return _meet(self.writes, other.reads) or _meet(self.writes, other.writes) or _meet(self.reads, other.writes)

    def feeds(self, other: Footprint) -> bool:
        """Whether `other` only reads what this layer writes (and neither writes what the other touches
        otherwise): it can follow this layer's stores."""
        return _meet(self.writes, other.reads) and not _meet(self.writes, other.writes) and \
            not _meet(self.reads, other.writes)

    def __or__(self, other: Footprint) -> Footprint:
        return Footprint(_merged([*self.reads, *other.reads]), _merged([*self.writes, *other.writes]))


@dataclass
class Beside:
    """A convolution layer and the layer that runs during it (a max pool, an LRN)."""

    host: Layer
    rider: Layer


RIDERS = (SeparableMaxPoolLayer, LrnLayer)
"""The layers that can run beside a convolution: vector-engine and DRAM work only, placeable anywhere above it."""


def _rider(layer: Layer, host: Layer, config: ArchConfig) -> Layer | None:
    """`layer` replanned into the scratchpad (and the accumulator) above `host`'s buffers, if it fits there."""
    spad = align(host.body.spad_end())
    if isinstance(layer.body, SeparableMaxPoolLayer):
        body = separable(layer.body.pool, config, spad)
        return None if body is None else Layer(layer.name, layer.kind, body)
    lrn = replace(layer.body, spad_base=spad, acc_base=align(host.body.acc_end()))
    try:
        lrn.check(config)
    except UnsupportedError:
        return None
    return Layer(layer.name, layer.kind, lrn)


def pair_layers(layers: list[Layer], footprint: Callable[[Layer], Footprint], config: ArchConfig) -> list[Layer]:
    """The layer order with each max pool or LRN that can run beside a convolution moved into it (a `Beside`
    layer); `footprint` gives a layer's DRAM footprint."""
    order: list[Layer] = list(layers)
    prints: dict[int, Footprint] = {}

    def printed(layer: Layer) -> Footprint:  # emitted on demand: a scan stops at the first layer it meets
        if id(layer) not in prints:
            prints[id(layer)] = footprint(layer)
        return prints[id(layer)]

    for layer in layers:
        if not isinstance(layer.body, RIDERS):
            continue
        at = order.index(layer)
        mine = printed(layer)
        hosts: list[tuple[Layer, Layer]] = []
        for direction in (-1, 1):
            k = at + direction
            while 0 <= k < len(order) and not printed(order[k]).meets(mine):
                hosts.append(order[k])
                k += direction
            if direction < 0 and k >= 0 and printed(order[k]).feeds(mine):
                hosts.append(order[k])  # the producer: the pool follows its stores tile by tile
        hosts = [(host, rider) for host in hosts if isinstance(host.body, GemmLayer) and not host.body.window
                 # (a window pool's first tile stores nothing: `_follow` restates a tile's CONFIG_STORE)
                 for rider in [_rider(layer, host, config)] if rider is not None]
        if not hosts:
            continue
        host, rider = max(hosts, key=lambda pair: pair[0].body.tiling.cycles * pair[0].body.source.batch)
        pair = Layer(f"{host.name}+{layer.name}", f"{host.kind}+{layer.kind}", Beside(host, rider))
        prints[id(pair)] = printed(host) | mine
        order[order.index(host)] = pair
        order.remove(layer)
    return order


def _chunks(instructions: list[Instr], starts: list[int]) -> list[list[Instr]]:
    bounds = [*starts, len(instructions)]
    return [instructions[a:b] for a, b in zip(bounds, bounds[1:])]


def _used(instructions: list[Instr]) -> set[int]:
    return {sem for i in instructions for sem, count in ((i.wait_sem, i.wait_count), (i.signal_sem, i.signal_count))
            if count}


def _renumbered(instructions: list[Instr], host: list[Instr], config: ArchConfig) -> list[Instr] | None:
    """The rider's instructions on semaphores the host leaves free (DONE stays: the pair's barrier counts both
    layers' last STOREs) and no layer signals across a barrier (PREFETCH, STORED, HANDOFF: the pair's
    neighbours may use them whether or not the host does); None if there are too few."""
    taken = _used(host) | {DONE, PREFETCH, STORED, HANDOFF}
    free = [s for s in range(config.semaphores) if s not in taken]
    wanted = sorted(_used(instructions) - {DONE})
    if len(wanted) > len(free):
        return None
    new = dict(zip(wanted, free)) | {DONE: DONE}

    def moved(i: Instr) -> Instr:
        changes = {f"{what}_sem": new[getattr(i, f"{what}_sem")] for what in ("wait", "signal")
                   if getattr(i, f"{what}_count")}
        return i.replace(**changes) if changes else i
    return [moved(i) for i in instructions]


def _chunk_ranges(chunks: list[list[Instr]], config: ArchConfig, write: bool) -> list[Ranges]:
    """The DRAM each chunk's STOREs write (`write`) or its LOADs read."""
    out: list[list[tuple[int, int]]] = [[] for _ in chunks]
    owner = [k for k, chunk in enumerate(chunks) for _ in chunk]
    for (instr, registers), k in zip(with_registers([i for chunk in chunks for i in chunk], config), owner):
        if instr.mnemonic in ("LOAD", "GATHER", "STORE"):
            out[k] += [(e.start, e.stop) for e in extents(instr, registers) if e.memory == "dram" and e.write == write]
    return [_merged(ranges) for ranges in out]


def _needs(host: list[list[Instr]], rider: list[list[Instr]], config: ArchConfig) -> list[int]:
    """For each rider tile, how many host tiles must have stored first: 1 + the last whose result it reads."""
    written, read = _chunk_ranges(host, config, True), _chunk_ranges(rider, config, False)
    needs, most = [], 0
    for ranges in read:
        most = max([most] + [t + 1 for t, w in enumerate(written) if _meet(w, ranges)])
        needs.append(most)
    return needs


def _config_copy(instr: Instr, sync: dict[str, int]) -> Instr:
    """A configuration instruction restated (its registers unchanged) to carry a wait or a signal."""
    return instr.replace(**{**dict.fromkeys(_SYNC, 0), **sync})


def _follow(host: list[list[Instr]], rider: list[list[Instr]], needs: list[int], sem: int) -> None:
    """Make each rider tile wait for the host tiles it reads: after each of the first `needs[-1]` host tiles'
    STOREs, a CONFIG_STORE restated signals `sem`; before each rider tile's first load, as many restated
    CONFIG_LOADs as it takes wait for the signals of the host tiles it needs and the tiles before it did not."""
    config_store = None
    for t, chunk in enumerate(host[:needs[-1]]):
        config_store = next((i for i in reversed(chunk) if i.mnemonic == "CONFIG_STORE"), config_store)
        chunk.append(_config_copy(config_store, {"signal_sem": sem, "signal_count": 1}))
    done = 0
    for chunk, need in zip(rider, needs):
        if need == done:
            continue
        first = next(k for k, i in enumerate(chunk) if i.spec.engine is Engine.LOAD)
        if chunk[first].mnemonic != "CONFIG_LOAD":
            raise AssertionError("a tile that follows another layer's stores starts its loads with CONFIG_LOAD")
        waits = []
        while need > done:
            count = min(need - done, MAX_COUNT)
            waits.append(_config_copy(chunk[first], {"wait_sem": sem, "wait_count": count}))
            done += count
        chunk[first:first] = waits


def config_state(program: list[Instr], config: ArchConfig) -> dict[str, dict]:
    """The fields of each configuration instruction in effect after `program` (its reset values where none ran)."""
    registers = reset_registers(config)
    state = {spec.mnemonic: {name: registers[spec.engine][name] for name, _ in spec.reset}
             for spec in INSTRUCTIONS if spec.reset}
    missing = set(state)
    for instr in reversed(program):
        if instr.mnemonic in missing:
            state[instr.mnemonic] = _fields(instr)
            missing.discard(instr.mnemonic)
            if not missing:
                break
    return state


def _fields(instr: Instr) -> dict:
    return {name: value for name, value in instr.fields().items() if name not in _SYNC}


def _busy(chunks: list[list[Instr]], config: ArchConfig) -> list[dict[Engine, int]]:
    """Each chunk's cycles on each engine: the static cycles of its instructions, a transfer's on an idle DRAM."""
    out: list[dict[Engine, int]] = [dict.fromkeys(ENGINES, 0) for _ in chunks]
    owner = [k for k, chunk in enumerate(chunks) for _ in chunk]
    for (instr, registers), k in zip(with_registers([i for chunk in chunks for i in chunk], config), owner):
        engine = instr.spec.engine
        if engine not in out[k]:
            continue
        timing = instr.spec.timing
        if timing.transfer is not None:
            out[k][engine] += profile(timing.transfer(instr, registers, config).box, config).unshared_cycles
        else:
            out[k][engine] += static_cycles(instr, registers, config)
    return out


def _slots(host: list[list[Instr]], rider: list[list[Instr]], needs: list[int], config: ArchConfig) -> list[int]:
    """The host tile in the middle of which each rider tile goes (len(host): after the last): the first, from
    LAG past the last host tile it reads and not before the rider tile before it, whose room is not used up,
    a host tile's room on each engine being what that engine has left while the busiest one works."""
    room = [{e: max(cost.values()) - c for e, c in cost.items()} for cost in _busy(host, config)]
    slots, at = [], 0
    for cost, need in zip(_busy(rider, config), needs):
        at = max(at, min(need - 1 + LAG, len(host)) if need else 0)
        while at < len(host) and any(c > room[at][e] for e, c in cost.items()):
            at += 1
        if at < len(host):
            room[at] = {e: r - cost[e] for e, r in room[at].items()}
        slots.append(at)
    return slots


def interleave(host: list[Instr], host_marks: list[tuple[int, int]], rider: list[Instr],
               rider_marks: list[tuple[int, int]], config: ArchConfig, state: dict[str, dict]) -> list[Instr] | None:
    """The two layers' instructions (each without its barrier, `marks` where each tile and its vector work
    start: pipeline.emit_layer) as one stream, each layer's order kept. The rider's tiles go in the middle of
    the host's, after a tile's loads and matrix work and before its vector work: on each engine they then
    queue behind the host work issued before them and ahead of the host work that waits for the array, so
    they run while the array computes. Each goes where the host leaves its engines room for it (`_slots`),
    and one that reads the host's result LAG tiles past the last it reads (whose stores it waits for:
    `_follow`); what does not fit runs after the host. Where the
    stream passes from one layer to the other, configuration instructions restated give the engines back the
    registers that layer left (from `state`, the configuration in effect before the pair), so every
    instruction runs with the registers it has when its layer runs alone. None if the semaphores do not
    suffice."""
    renumbered = _renumbered(rider, host, config)
    if renumbered is None:
        return None
    mine = _chunks(host, [start for start, _ in host_marks])
    theirs = _chunks(renumbered, [start for start, _ in rider_marks])
    needs = _needs(mine, theirs, config)
    if needs[-1]:
        taken = _used(host) | _used(renumbered) | {DONE, PREFETCH}
        free = [s for s in range(config.semaphores) if s not in taken]
        if not free:
            return None
        _follow(mine, theirs, needs, free[0])
    slots: list[list[list[Instr]]] = [[] for _ in range(len(mine) + 1)]
    for chunk, at in zip(theirs, _slots(mine, theirs, needs, config)):
        slots[at].append(chunk)
    merged: list[Instr] = []
    current, views = dict(state), [dict(state), dict(state)]

    def put(chunk: list[Instr], view: dict[str, dict]) -> None:
        for mnemonic, fields in view.items():
            if current[mnemonic] != fields:
                merged.append(make_instr(mnemonic, **fields))
                current[mnemonic] = fields
        for instr in chunk:
            if instr.spec.reset:
                view[instr.mnemonic] = current[instr.mnemonic] = _fields(instr)
            merged.append(instr)

    for chunk, (start, mid), riders in zip(mine, host_marks, slots):
        put(chunk[:mid - start], views[0])
        for extra in riders:
            put(extra, views[1])
        put(chunk[mid - start:], views[0])
    for extra in slots[-1]:
        put(extra, views[1])
    return merged


_SYNC = ("wait_sem", "wait_count", "signal_sem", "signal_count")
