"""A static view of a program: the registers each instruction sees and the memory it touches.

Each engine runs its queue in program order, so the configuration registers an
instruction executes with are known before anything runs. From them follow the
exact bounds of every region an instruction reads or writes (`extents`), which
lets a loader reject a binary whose instructions leave the SRAMs, DRAM or the
memory plan, and `check_program` the whole-program rules (one END, last;
semaphores the machine has; regions inside memories; static faults).
`semaphore_protocol` pairs every wait with the signals whose tokens it takes,
by program order and counts: the happens-before the program declares.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

from .config import ArchConfig, format_size
from .encoding import Instr
from .errors import IsaError
from .schema import Engine, FieldValue, FromConfig
from .table import INSTRUCTIONS

Registers = dict[str, FieldValue]
LUT_BYTES = 256
WIDE_LUT_BYTES = 1024
"""LUT32's table: 256 int32 entries."""
REQUANT_ENTRY_BYTES = 8


class ProgramError(IsaError):
    """A decoded program that cannot run on the configured machine; names the instruction.

    `index` is the offending instruction's position when there is one (a container
    reader turns it into a byte offset).
    """

    def __init__(self, message: str, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


@dataclass(frozen=True)
class Extent:
    """Addresses start..stop-1 of one memory ('dram', 'spad' bytes; 'acc' words) read or written."""

    memory: str
    start: int
    stop: int
    write: bool

    def __str__(self) -> str:
        unit = "words" if self.memory == "acc" else "bytes"
        return f"{'writes' if self.write else 'reads'} {self.memory} {unit} {self.start:#x}..{self.stop - 1:#x}"


def reset_registers(config: ArchConfig) -> dict[Engine, Registers]:
    """Every engine's configuration registers at program start."""
    registers: dict[Engine, Registers] = {engine: {} for engine in Engine}
    for spec in INSTRUCTIONS:
        for name, value in spec.reset:
            registers[spec.engine][name] = getattr(config, value.parameter) if isinstance(value, FromConfig) else value
    return registers


def with_registers(program: Iterable[Instr], config: ArchConfig) -> Iterator[tuple[Instr, Registers]]:
    """Each instruction with the registers of its engine as it executes (config instructions update them)."""
    registers = reset_registers(config)
    for instr in program:
        own = registers[instr.spec.engine]
        if instr.spec.reset:
            own = registers[instr.spec.engine] = {**own, **instr.fields()}
            for name in ("wait_sem", "wait_count", "signal_sem", "signal_count"):
                del own[name]
        yield instr, own


def _box(base: int, counts_strides: Iterable[tuple[int, int]], elem: int) -> tuple[int, int]:
    """start, stop of a strided box of elem-byte elements (strides are never negative)."""
    return base, base + sum((count - 1) * stride for count, stride in counts_strides) + elem


def _sram(space: FieldValue, start: int, elements: int, write: bool) -> Extent:
    return Extent(str(space), start, start + elements, write)


def _dma(i: Instr, r: Registers, write_dram: bool) -> list[Extent]:
    elem = r["elem_bytes"]
    if i.space == "acc" and elem % 4:
        raise ProgramError(f"elem_bytes = {elem} is not a multiple of 4, as an accumulator transfer needs")
    start, stop = _box(i.dram, ((i.planes, r["plane_stride"]), (i.rows, r["row_stride"]), (i.cols, r["col_stride"])),
                       elem)
    if write_dram:
        image = i.planes * i.rows * i.cols * elem
    else:
        image = i.planes * (r["pad_top"] + i.rows + r["pad_bottom"]) * (r["pad_left"] + i.cols + r["pad_right"]) * elem
    elements = image // 4 if i.space == "acc" else image
    return [Extent("dram", start, stop, write_dram), _sram(i.space, i.sram, elements, not write_dram)]


def _matmul(i: Instr, r: Registers) -> list[Extent]:
    if r["im2col"]:
        window = r["kw"] * r["channels"]
        if i.k % window:
            raise ProgramError(f"k = {i.k} is not a multiple of kw * channels = {window} (im2col)")
        kh = i.k // window
        # The farthest output pixel is the last one, or the end of the row before it.
        last_row, last_col = divmod(i.rows - 1, r["out_w"])
        candidates = [(last_row, last_col)] + ([(last_row - 1, r["out_w"] - 1)] if last_row else [])
        pixel = max(oy * r["stride_h"] * r["row_pitch"] + ox * r["stride_w"] * r["pixel_pitch"]
                    for oy, ox in candidates)
        tap = (kh - 1) * r["dil_h"] * r["row_pitch"] + (r["kw"] - 1) * r["dil_w"] * r["pixel_pitch"] + r["channels"]
        inp = Extent("spad", i.inp, i.inp + pixel + tap, False)
    else:
        inp = Extent("spad", i.inp, i.inp + i.rows * i.k, False)
    out = [Extent("acc", i.acc, i.acc + i.rows * i.n, True)]
    if i.acc_mode:
        out.append(Extent("acc", i.acc, i.acc + i.rows * i.n, False))
    return [inp, Extent("spad", i.wgt, i.wgt + i.k * i.n, False), *out]


def _binary(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    return [_sram(i.src1_space, i.src1, size, False), _sram(i.src2_space, i.src2, i.cols if i.bcast else size, False),
            _sram(i.dst_space, i.dst, size, True)]


def _mac(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    out = [Extent("acc", i.dst, i.dst + size, True)]
    if i.acc_mode:
        out.append(Extent("acc", i.dst, i.dst + size, False))
    return [Extent("spad", i.src, i.src + (i.rows - 1) * i.pitch + i.cols, False),
            Extent("spad", i.wgt, i.wgt + i.cols, False), *out]


def _unary(i: Instr, r: Registers) -> list[Extent]:
    return [_sram(i.src_space, i.src, i.count, False), _sram(i.dst_space, i.dst, i.count, True)]


def _requant(i: Instr, r: Registers) -> list[Extent]:
    size = i.rows * i.cols
    table = [Extent("spad", r["table"], r["table"] + REQUANT_ENTRY_BYTES * i.cols, False)] if r["per_channel"] else []
    if r["bias_row"]:
        table.append(Extent("acc", r["bias"], r["bias"] + i.cols, False))
    return [Extent("acc", i.src, i.src + size, False), *table, Extent("spad", i.dst, i.dst + size, True)]


def pool_output(i: Instr, r: Registers) -> tuple[int, int]:
    """(OH, OW) of a POOL under the window registers; a ProgramError if the output is empty."""
    oh = (i.height + r["pad_top"] + r["pad_bottom"] - r["kh"]) // r["stride_h"] + 1
    ow = (i.width + r["pad_left"] + r["pad_right"] - r["kw"]) // r["stride_w"] + 1
    if oh < 1 or ow < 1:
        raise ProgramError(f"a {r['kh']} x {r['kw']} window leaves no output on a {i.height} x {i.width} image")
    return oh, ow


def _pool(i: Instr, r: Registers) -> list[Extent]:
    oh, ow = pool_output(i, r)
    return [Extent("spad", i.src, i.src + i.height * i.width * i.channels, False),
            Extent("spad", i.dst, i.dst + oh * ow * i.channels, True)]


def _reduce(i: Instr, r: Registers) -> list[Extent]:
    out = [Extent("acc", i.dst, i.dst + i.cols, True)]
    if i.accumulate:
        out.append(Extent("acc", i.dst, i.dst + i.cols, False))
    return [_sram(i.src_space, i.src, i.rows * i.cols, False), *out]


_EXTENTS: dict[str, Callable[[Instr, Registers], list[Extent]]] = {
    "LOAD": lambda i, r: _dma(i, r, write_dram=False),
    "STORE": lambda i, r: _dma(i, r, write_dram=True),
    "GATHER": lambda i, r: [Extent("acc", i.idx, i.idx + i.count, False),
                            Extent("dram", *_box(i.dram, ((i.rows, r["row_stride"]),), r["elem_bytes"]), False),
                            Extent("spad", i.sram, i.sram + i.count * r["elem_bytes"], True)],
    "MATMUL": _matmul,
    "vector-binary": _binary,
    "vector-immediate": _unary,
    "CLAMP": _unary,
    "LUT": lambda i, r: [Extent("spad", i.src, i.src + i.count, False), Extent("spad", i.dst, i.dst + i.count, True)],
    "LUT_LOAD": lambda i, r: [Extent("spad", i.src, i.src + LUT_BYTES, False)],
    "REQUANT": _requant,
    "POOL": _pool,
    "REDUCE": _reduce,
    "LUT32": lambda i, r: [Extent("acc", i.src, i.src + i.count, False),
                           Extent("spad", i.table, i.table + WIDE_LUT_BYTES, False),
                           Extent("acc", i.dst, i.dst + i.count, True)],
    "VDIV": _binary,
    "VMAC": _mac,
}


def extents(instr: Instr, registers: Registers) -> list[Extent]:
    """The regions an instruction reads and writes, given its engine's registers (none for config/control)."""
    rule = _EXTENTS.get(instr.mnemonic) or _EXTENTS.get(instr.spec.family)
    return rule(instr, registers) if rule else []


def _where(index: int, instr: Instr) -> str:
    return f"instruction {index} ({instr.mnemonic})"


def program_extents(program: list[Instr], config: ArchConfig) -> list[list[Extent]]:
    """`extents` of every instruction, in program order; a ProgramError names the instruction of a static fault."""
    result = []
    for index, (instr, registers) in enumerate(with_registers(program, config)):
        try:
            result.append(extents(instr, registers))
        except ProgramError as exc:
            raise ProgramError(f"{_where(index, instr)}: {exc}", index) from None
    return result


def check_program(program: list[Instr], config: ArchConfig) -> None:
    """Reject a program this machine cannot run, naming the first offending instruction."""
    if not program or program[-1].mnemonic != "END":
        raise ProgramError(f"the program must end with END (it has {len(program)} instructions"
                           f"{', the last a ' + program[-1].mnemonic if program else ''})")
    sizes = {"dram": config.dram_bytes, "spad": config.scratchpad_bytes, "acc": config.accumulator_bytes // 4}
    for index, (instr, found) in enumerate(zip(program, program_extents(program, config))):
        if instr.mnemonic == "END" and index != len(program) - 1:
            raise ProgramError(f"{_where(index, instr)}: END before the last instruction ({len(program) - 1})",
                               index)
        for what in ("wait", "signal"):
            sem = getattr(instr, f"{what}_sem")
            if getattr(instr, f"{what}_count") and sem >= config.semaphores:
                raise ProgramError(f"{_where(index, instr)}: {what} on s{sem}, but architecture '{config.name}' "
                                   f"has {config.semaphores} semaphores", index)
        for extent in found:
            if extent.stop > sizes[extent.memory]:
                size = sizes[extent.memory] * (4 if extent.memory == "acc" else 1)
                raise ProgramError(f"{_where(index, instr)}: {extent}, beyond the {format_size(size)} "
                                   f"{extent.memory} of architecture '{config.name}'", index)


@dataclass(frozen=True)
class SemaphoreProtocol:
    """How a program's semaphores pair signals with waits, each counter handing out its tokens in program
    order: the k-th wait on a semaphore takes the tokens after those of the waits before it.

    The pairing is what the program means; it is what every run does when the semaphore's signals cannot
    overtake one another and its waits cannot either, which `follows` and `previous_wait` state.
    """

    consumes: dict[int, tuple[int, ...]]
    """wait instruction -> the signalling instructions whose tokens it takes"""
    follows: dict[int, tuple[int, ...]]
    """signalling instruction -> per other engine, the latest earlier signal of the semaphore it must come
    after: were it first, a wait given that signal's tokens could take its tokens instead"""
    previous_wait: dict[int, int]
    """wait instruction -> the wait before it on its semaphore, when another engine makes that one"""


def semaphore_protocol(program: list[Instr]) -> SemaphoreProtocol:
    """Pair waits and signals per semaphore by program order and counts (tokens no wait takes stay unpaired)."""
    engines = [instr.spec.engine for instr in program]
    signals: dict[int, list[tuple[int, int]]] = {}  # semaphore -> (instruction, count) in program order
    waits: dict[int, list[tuple[int, int]]] = {}
    for index, instr in enumerate(program):
        wait_sem, wait_count, signal_sem, signal_count = instr.values[-4:]  # the sync fields come last
        if wait_count:
            waits.setdefault(wait_sem, []).append((index, wait_count))
        if signal_count:
            signals.setdefault(signal_sem, []).append((index, signal_count))
    consumes: dict[int, tuple[int, ...]] = {}
    follows: dict[int, tuple[int, ...]] = {}
    previous_wait: dict[int, int] = {}
    for sem in signals.keys() | waits.keys():
        waiting = waits.get(sem, [])
        ends, total = [], 0  # ends[k]: the tokens waits 0..k take
        for _, count in waiting:
            total += count
            ends.append(total)
        taken: list[list[int]] = [[] for _ in waiting]
        latest: dict[Engine, tuple[list[int], list[int]]] = {}  # engine -> (first waits, signals) so far
        start = 0
        for index, count in signals.get(sem, []):
            stop = start + count
            first, last = bisect_right(ends, start), bisect_right(ends, stop - 1)
            for k in range(first, min(last + 1, len(waiting))):
                taken[k].append(index)
            # The latest earlier signal of each other engine that feeds a wait before this signal's last.
            engine = engines[index]
            follows[index] = tuple(earlier[bisect_left(firsts, last) - 1] for other, (firsts, earlier) in latest.items()
                                   if other is not engine and bisect_left(firsts, last))
            firsts, earlier = latest.setdefault(engine, ([], []))
            firsts.append(first)
            earlier.append(index)
            start = stop
        consumes.update((index, tuple(t)) for (index, _), t in zip(waiting, taken))
        # Two waits on other engines could swap, unless one signal's tokens serve both (either order, same pairing).
        for (before, _), (index, _) in zip(waiting, waiting[1:]):
            if engines[before] is not engines[index] and (len(consumes[index]) != 1
                                                          or consumes[index] != consumes[before]):
                previous_wait[index] = before
    return SemaphoreProtocol(consumes, follows, previous_wait)
