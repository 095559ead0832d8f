"""One module's text cut into several module texts that link back together: LLVM then optimises
and emits them at once, one per core (jit.py), instead of the whole module on one.

The cut works on the text ModuleBuilder prints (llvmlite's layout: a `define` line, `{`, the body,
`}`; one line per global, declaration or metadata node). The caller names the units that may move:
groups of functions that go to one part together (a kernel and the call sites it is reached
through, module.py). Units go to parts greedily, the largest first to the lightest part, by the
length of their text (LLVM's time per function grows with it); part 0 keeps everything else (the
entry points, the thread pool, the chunk protocol). Each part is a complete module: the header,
every declaration and metadata node (unused ones cost nothing), its functions, and the globals
they read. An internal constant a part reads is copied into it (a lookup table: identical copies
cannot be told apart); any other global is defined by one part and declared by the others. A
function one part defines and another calls becomes `hidden` (linked between the parts, never
exported from them) and is declared where it is called. A unit's functions keep their calls to
each other inside one module, so LLVM's interprocedural passes (constant arguments, dead
arguments, return values) see exactly the calls they saw in the whole module.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ....errors import UnsupportedError

_SYMBOL = re.compile(r'@(?:"((?:[^"\\]|\\.)*)"|([-a-zA-Z$._][-a-zA-Z$._0-9]*))')
_LINKAGE = re.compile(r"^(define|@\S+ =) (internal |private |external )?")
HEADER = ("; ModuleID", "target ", "source_filename")
FIXED_WEIGHT = 3
"""What a character of the functions that stay in part 0 costs LLVM against one of a unit: the
thread entry holds every call and the chunk protocol's loops around them. Two parts' CPU seconds
(each part compiled alone) at weights 2 / 3 / 4: efficientnet_b0 2.62+2.40 / 2.52+2.25 / 2.26+2.68;
resnet50 at 3: 1.34+1.21, at 4: 1.36+1.42; googlenet at 3: 2.64+2.59."""


@dataclass
class _Entity:
    """One top-level definition of the module text: its symbol, its text, the symbols it uses."""

    kind: str  # "define", "global"
    name: str
    text: str
    uses: set[str] = field(default_factory=set)


@dataclass
class _Module:
    """A parsed module text: what every part repeats (header, declarations, metadata) and the
    definitions, by symbol, in the order of the text."""

    header: list[str]
    declarations: list[str]
    metadata: list[str]
    entities: dict[str, _Entity]


def _symbol(match: re.Match) -> str:
    return match.group(1) if match.group(1) is not None else match.group(2)


def _parse(text: str) -> _Module:
    """The module text as its header, declarations, metadata and definitions (in order)."""
    module = _Module([], [], [], {})
    lines = iter(text.splitlines())
    for line in lines:
        if not line.strip() or line.startswith(";") and not line.startswith("; ModuleID"):
            continue
        if line.startswith(HEADER):
            module.header.append(line)
        elif line.startswith("declare "):
            module.declarations.append(line)
        elif line.startswith(("!", "attributes ")):
            module.metadata.append(line)
        elif line.startswith("define "):
            body = [line]
            for inner in lines:
                body.append(inner)
                if inner == "}":
                    break
            else:
                raise UnsupportedError(f"cpu backend: the module text ends inside {line[:80]!r}")
            name = _symbol(_SYMBOL.search(line))
            entity = _Entity("define", name, "\n".join(body))
            entity.uses = {_symbol(m) for m in _SYMBOL.finditer(entity.text)} - {name}
            module.entities[name] = entity
        elif line.startswith("@"):
            name = _symbol(_SYMBOL.match(line))
            if _SYMBOL.search(line, line.index("=")):
                raise UnsupportedError(f"cpu backend: global @{name} refers to another symbol, which the module split does not follow")
            module.entities[name] = _Entity("global", name, line)
        else:
            raise UnsupportedError(f"cpu backend: the module split does not know the top-level line {line[:80]!r}")
    return module


def assign(sizes: Sequence[int], parts: int, base: int) -> list[int]:
    """The part of each unit of `sizes`: the largest first, each to the part with the least text so
    far, part 0 starting at `base` (what stays there anyway); ties go to the lower part."""
    loads = [base] + [0] * (parts - 1)
    placed = [0] * len(sizes)
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        part = min(range(parts), key=lambda p: (loads[p], p))
        placed[index] = part
        loads[part] += sizes[index]
    return placed


def _size(entities: dict[str, _Entity], names: Sequence[str]) -> int:
    """The text LLVM reads for the functions `names`: theirs and that of the globals they use
    (a large lookup table costs about as much per character to parse and emit as code)."""
    used = {u for name in names for u in entities[name].uses if u in entities and entities[u].kind == "global"}
    return sum(len(entities[name].text) for name in [*names, *used])


def split_module(text: str, units: Sequence[Sequence[str]], parts: int) -> list[str]:
    """`text` as `parts` module texts (fewer when there are fewer units to spread), each of `units`
    (function names) in one part, everything else in part 0; `text` itself when one part."""
    parts = min(parts, len(units) + 1)
    if parts <= 1:
        return [text]
    module = _parse(text)
    entities = module.entities
    functions = {name for name, e in entities.items() if e.kind == "define"}
    owner: dict[str, int] = {}
    moved = {name for unit in units for name in unit}
    if moved - functions:
        raise ValueError(f"cannot move @{min(moved - functions)}: the module defines no such function")
    sizes = [_size(entities, unit) for unit in units]
    base = FIXED_WEIGHT * _size(entities, [name for name in functions if name not in moved])
    for unit, part in zip(units, assign(sizes, parts, base)):
        for name in unit:
            owner[name] = part
    for name in functions - moved:
        owner[name] = 0
    readers: dict[str, set[int]] = {}
    for name in functions:
        for used in entities[name].uses:
            readers.setdefault(used, set()).add(owner[name])
    return [_part_text(module, owner, readers, part) for part in range(parts)]


def _copied(entity: _Entity) -> bool:
    """Whether each part that reads the global may hold its own copy (an internal constant)."""
    return bool(re.match(r'@\S+ = (internal|private) (unnamed_addr )?constant ', entity.text))


def _part_text(module: _Module, owner: dict[str, int], readers: dict[str, set[int]], part: int) -> str:
    """The module text of `part`: header, declarations, its globals, its functions, metadata."""
    lines = [*module.header, *module.declarations]
    for entity in module.entities.values():
        if entity.kind == "global":
            lines.extend(_global_lines(entity, readers, part))
    for entity in module.entities.values():
        if entity.kind != "define":
            continue
        if owner[entity.name] == part:
            shared = bool(readers.get(entity.name, set()) - {part})
            lines.append(_linked(entity.text) if shared else entity.text)
        elif part in readers.get(entity.name, ()):
            lines.append(_declaration(entity.text))
    lines.extend(module.metadata)
    return "\n".join(lines) + "\n"


def _global_lines(entity: _Entity, readers: dict[str, set[int]], part: int) -> list[str]:
    """A global as `part` sees it: its definition, a copy, a declaration, or nothing. A global
    nothing reads stays in part 0."""
    reading = readers.get(entity.name, {0})
    if part not in reading:
        return []
    if _copied(entity) or len(reading) == 1:
        return [entity.text]
    if part == min(reading):
        return [_linked(entity.text)]
    head = _LINKAGE.sub("", entity.text, count=1)
    kind, rest = re.match(r"(?:\S+ )*?(global|constant) (.*)", head).groups()
    visibility = "hidden " if _internal(entity.text) else ""
    return [f'@"{entity.name}" = external {visibility}{kind} {_first_type(rest)}']


def _first_type(text: str) -> str:
    """The type at the start of a global's `type initializer` text."""
    depth = 0
    for index, char in enumerate(text):
        if char in "[<{(":
            depth += 1
        elif char in "]>})":
            depth -= 1
        elif char == " " and depth == 0:
            return text[:index]
    return text


def _internal(text: str) -> bool:
    match = _LINKAGE.match(text)
    return match is not None and (match.group(2) or "").strip() in ("internal", "private")


def _linked(text: str) -> str:
    """A definition another part links to: an internal one becomes hidden (external between the
    parts, never exported from them), any other stays as it is."""
    if not _internal(text):
        return text
    return _LINKAGE.sub(lambda m: f"{m.group(1)} hidden ", text, count=1)


def _declaration(text: str) -> str:
    """The declaration of the function whose definition is `text`."""
    visibility = "hidden " if _internal(text) else ""
    return f"declare {visibility}" + _LINKAGE.sub("", text.split("\n", 1)[0], count=1).removesuffix(" {")
