"""Validating a binary and relocating it to where its regions were placed in device DRAM.

Validation is the container reader's, with the device's configuration: magic, format and ISA
versions, header, table and section CRCs, the configuration hash, every instruction decoded and
every DRAM access inside one region of the plan. Nothing of a refused binary reaches the device.

The container has no relocation table, and needs none: its addresses are absolute within its
memory plan, and every DRAM address an instruction holds lies in one region (the reader checks
each access). The loader places each region in its own block and moves every DRAM address field
and every tensor by the offset of the region holding it; the relocated program is then checked
again against the device, and each access against the blocks of its own network.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from isa.config import ArchConfig
from isa.container import NpuBinary, read_npub
from isa.encoding import Instr
from isa.npub_instructions import DRAM_FIELDS
from isa.npub_layout import NpubError, RegionKind
from isa.program import ProgramError, check_program, program_extents
from isa.sections import MemoryPlan, TensorInfo

from .allocator import Block
from .errors import LoadError


def validate(data: bytes, config: ArchConfig, name: str) -> NpuBinary:
    """The decoded binary, if it was built for `config` and every check passes; LoadError naming the fault."""
    try:
        return read_npub(data, config=config, name=name)
    except NpubError as err:
        raise LoadError(f"refused to load '{name}': {err}") from None


def region_deltas(plan: MemoryPlan, blocks: Mapping[RegionKind, Block]) -> dict[RegionKind, int]:
    """How far each region moves: its block's address minus its base in the plan."""
    return {kind: blocks[kind].address - region.base for kind, region in plan.regions().items()}


def relocate_program(binary: NpuBinary, deltas: Mapping[RegionKind, int]) -> list[Instr]:
    """The program with every DRAM address field moved with the region it points into."""
    program = []
    for instr in binary.instructions:
        fields = DRAM_FIELDS[instr.mnemonic]
        if fields:
            instr = instr.replace(**{f: getattr(instr, f) + deltas[binary.plan.region_of(getattr(instr, f))]
                                     for f in fields})
        program.append(instr)
    return program


def relocate_tensors(binary: NpuBinary, deltas: Mapping[RegionKind, int]) -> list[TensorInfo]:
    """The tensor table with every address moved with its region."""
    return [replace(t, dram_address=t.dram_address + deltas[binary.plan.region_of(t.dram_address, t.size_bytes)])
            for t in binary.tensors]


def check_placed(name: str, program: list[Instr], config: ArchConfig, blocks: Mapping[RegionKind, Block]) -> None:
    """The relocated program runs on `config` and touches only its own network's blocks."""
    try:
        check_program(program, config)
        found = program_extents(program, config)
    except ProgramError as err:
        raise LoadError(f"refused to load '{name}': after relocation, {err}") from None
    for index, extents in enumerate(found):
        for extent in extents:
            if extent.memory == "dram" and not any(b.address <= extent.start and extent.stop <= b.end
                                                   for b in blocks.values()):
                raise LoadError(f"refused to load '{name}': after relocation, instruction {index} "
                                f"({program[index].mnemonic}) {extent}, outside the network's DRAM blocks")


@dataclass
class LoadedNetwork:
    """A network resident on a device: its binary, its blocks, and the relocated program and tensors."""

    name: str
    binary: NpuBinary
    blocks: dict[RegionKind, Block]
    program: list[Instr]
    tensors: list[TensorInfo]

    @property
    def inputs(self) -> dict[str, TensorInfo]:
        return {name: self.tensors[i] for name, i in self.binary.bindings.inputs.items()}

    @property
    def outputs(self) -> dict[str, TensorInfo]:
        return {name: self.tensors[i] for name, i in self.binary.bindings.outputs.items()}

    @property
    def dram_bytes(self) -> int:
        return sum(b.size for b in self.blocks.values())
