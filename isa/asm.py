"""Assembly text for NPU instructions, derived from the ISA table.

One instruction per line: the mnemonic, then every field as `name=value` in
table order, then the synchronisation after a semicolon:

    MATMUL inp=0x100 wgt=0x2000 acc=0x0 rows=196 k=2304 n=64 acc_mode=1 ; wait s3x2 signal s4

`wait s3x2` waits for semaphore 3 to reach 2 (and takes 2), `signal s4` adds 1
to semaphore 4 (`s4x2` adds 2). `#` starts a comment. `assemble(disassemble(p))`
gives back `p`.
"""
from __future__ import annotations

import re
from typing import Iterable

from .encoding import Instr, make_instr
from .errors import AsmError, IsaError
from .table import BY_MNEMONIC

_SEMAPHORE = re.compile(r"^s(\d+)(?:x(\d+))?$")


def _sync_text(what: str, sem: int, count: int) -> str:
    return f"{what} s{sem}" + (f"x{count}" if count != 1 else "")


def format_instr(instr: Instr) -> str:
    """One line of assembly for one instruction."""
    spec = instr.spec
    parts = [instr.mnemonic]
    parts += [f"{f.name}={f.kind.text(value)}" for f, value in zip(spec.fields, instr.values)]
    sync = []
    if instr.wait_count:
        sync.append(_sync_text("wait", instr.wait_sem, instr.wait_count))
    if instr.signal_count:
        sync.append(_sync_text("signal", instr.signal_sem, instr.signal_count))
    if sync:
        parts += [";", *sync]
    return " ".join(parts)


def disassemble(instrs: Iterable[Instr]) -> str:
    """The program as assembly text, one line per instruction."""
    return "".join(format_instr(i) + "\n" for i in instrs)


def parse_instr(line: str, lineno: int = 1) -> Instr | None:
    """The instruction on one line of assembly, or None for a blank or comment-only line."""
    text = line.split("#", 1)[0]
    body, _, sync = text.partition(";")
    tokens = body.split()
    if not tokens:
        if sync.strip():
            raise AsmError(f"line {lineno}: synchronisation without an instruction")
        return None
    mnemonic = tokens[0].upper()
    spec = BY_MNEMONIC.get(mnemonic)
    if spec is None:
        raise AsmError(f"line {lineno}: unknown instruction '{tokens[0]}'")
    fields: dict[str, object] = {}
    for token in tokens[1:]:
        name, eq, value = token.partition("=")
        if not eq or not name or not value:
            raise AsmError(f"line {lineno}: {mnemonic}: expected name=value, got '{token}'")
        try:
            kind = spec.field(name).kind
        except KeyError:
            raise AsmError(f"line {lineno}: {mnemonic}: unknown field '{name}' "
                           f"(fields: {', '.join(f.name for f in spec.fields) or 'none'})") from None
        if name in fields:
            raise AsmError(f"line {lineno}: {mnemonic}: field '{name}' given twice")
        try:
            fields[name] = kind.parse(value)
        except ValueError:
            raise AsmError(f"line {lineno}: {mnemonic}: field '{name}' value '{value}' is not an integer") from None
    fields.update(_parse_sync(sync, lineno, mnemonic))
    try:
        return make_instr(mnemonic, **fields)
    except IsaError as exc:
        raise AsmError(f"line {lineno}: {exc}") from None


def _parse_sync(text: str, lineno: int, mnemonic: str) -> dict[str, int]:
    """`wait sN[xC]` and `signal sN[xC]` after the semicolon, each at most once."""
    tokens = text.split()
    fields: dict[str, int] = {}
    if len(tokens) % 2:
        raise AsmError(f"line {lineno}: {mnemonic}: expected 'wait sN[xC]' or 'signal sN[xC]' after ';', "
                       f"got '{text.strip()}'")
    for what, operand in zip(tokens[::2], tokens[1::2]):
        match = _SEMAPHORE.match(operand)
        if what not in ("wait", "signal") or match is None:
            raise AsmError(f"line {lineno}: {mnemonic}: expected 'wait sN[xC]' or 'signal sN[xC]', "
                           f"got '{what} {operand}'")
        if f"{what}_sem" in fields:
            raise AsmError(f"line {lineno}: {mnemonic}: '{what}' given twice")
        fields[f"{what}_sem"] = int(match.group(1))
        fields[f"{what}_count"] = int(match.group(2) or 1)
        if fields[f"{what}_count"] == 0:
            raise AsmError(f"line {lineno}: {mnemonic}: '{what} {operand}' has count 0 (omit it instead)")
    return fields


def assemble(text: str, first_line: int = 1) -> list[Instr]:
    """The instructions of an assembly text; errors name the line (numbered from `first_line`)."""
    program = []
    for offset, line in enumerate(text.splitlines()):
        instr = parse_instr(line, first_line + offset)
        if instr is not None:
            program.append(instr)
    return program
