"""The IR's assembly-like text form (paper Figure 3): a printer and a parser from one spec.

    function main
    declare {
      %x = weight input float32<1x8>
      %w = weight constant float32<8x4>
      %y = weight output float32<1x4>
    }
    program {
      %a0 = allocactivation {type=float32<1x4>}
      %mm = matmul @out %a0, @in %x, @in %w
      %cp = copy @out %y, @in %a0
      %d0 = deallocactivation @out %a0
    }

Operand directions, attribute names and how each attribute prints all come from
the instruction records, so `parse(format(f))` rebuilds `f` (constant data is not
printed; pass it to `parse` to attach it).
"""
from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

import numpy as np

from ...errors import GlowError
from ...graph.spec import AttrKind
from ...graph.types import ElemKind, Type
from .function import Instruction, IRFunction, Value
from .instructions import InstrSpec, spec_by_mnemonic


def format_type(t: Type) -> str:
    """A type exactly (the quantization scale round-trips)."""
    dims = "x".join(str(d) for d in t.shape)
    if t.per_channel:
        scales, offsets = ",".join(map(repr, t.scale)), ",".join(map(str, t.offset))
        return f"{t.elem.value}[axis={t.axis},scales=({scales}),offsets=({offsets})]<{dims}>"
    if t.elem.is_quantized:
        return f"{t.elem.value}[{t.scale!r},{t.offset}]<{dims}>"
    return f"{t.elem.value}<{dims}>"


def _format_float(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if v == math.inf else ("-inf" if v == -math.inf else repr(v)))


def format_attr(kind: AttrKind, value: Any) -> str:
    if kind is AttrKind.INT:
        return str(value)
    if kind is AttrKind.FLOAT:
        return _format_float(value)
    if kind is AttrKind.BOOL:
        return "true" if value else "false"
    if kind is AttrKind.STR:
        return json.dumps(value)
    if kind is AttrKind.INTS:
        return "[" + ", ".join(str(v) for v in value) + "]"
    if kind is AttrKind.FLOATS:
        return "[" + ", ".join(_format_float(v) for v in value) + "]"
    if kind is AttrKind.STRS:
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    if kind is AttrKind.ELEM:
        return value.value
    if kind is AttrKind.TYPE:
        return format_type(value)
    array = np.asarray(value)
    return f"array<{array.dtype.name}>({json.dumps(list(array.shape))}, {json.dumps(array.ravel().tolist())})"


def format_instruction(instr: Instruction) -> str:
    operands = []
    for slot, value in zip(instr.operand_slots(), instr.operands):
        operands.append(f"{slot.kind.value} {'none' if value is None else '%' + value.name}")
    text = f"%{instr.name} = {instr.spec.mnemonic}"
    if operands:
        text += " " + ", ".join(operands)
    if instr.attrs:
        shown = ", ".join(f"{k}={format_attr(instr.spec.attr_index[k].kind, v)}" for k, v in instr.attrs.items())
        text += " {" + shown + "}"
    return text


def format_ir(function: IRFunction) -> str:
    lines = [f"function {function.name}", "declare {"]
    lines += [f"  %{w.name} = weight {w.role} {format_type(w.type)}" for w in function.weights.values()]
    lines += ["}", "program {"]
    lines += ["  " + format_instruction(i) for i in function.instructions]
    lines.append("}")
    return "\n".join(lines)


# -- parsing ---------------------------------------------------------------------------------------
_TYPE = re.compile(r"^([a-z0-9]+)(?:\[([^,\]]+),(-?\d+)\])?<([0-9x]*)>$")
_WEIGHT = re.compile(r"^%(\S+) = weight (constant|input|output) (\S+)$")
_INSTR = re.compile(r"^%(\S+) = ([a-z0-9_]+)(.*)$")


_CHANNEL_TYPE = re.compile(r"^([a-z0-9]+)\[axis=(\d+),scales=\(([^)]*)\),offsets=\(([^)]*)\)\]<([0-9x]*)>$")


def parse_type(text: str) -> Type:
    channels = _CHANNEL_TYPE.match(text.strip())
    if channels:
        dims = tuple(int(d) for d in channels.group(5).split("x")) if channels.group(5) else ()
        try:
            return Type(ElemKind(channels.group(1)), dims, tuple(float(s) for s in channels.group(3).split(",")),
                        tuple(int(o) for o in channels.group(4).split(",")), int(channels.group(2)))
        except ValueError as err:
            raise GlowError(f"not an IR type: '{text}' ({err})") from None
    match = _TYPE.match(text.strip())
    if not match:
        raise GlowError(f"not an IR type: '{text}'")
    elem = ElemKind(match.group(1))
    dims = tuple(int(d) for d in match.group(4).split("x")) if match.group(4) else ()
    if match.group(2) is not None:
        return Type(elem, dims, float(match.group(2)), int(match.group(3)))
    return Type(elem, dims)


def _parse_float(text: str) -> float:
    return float(text.strip())


def parse_attr(kind: AttrKind, text: str) -> Any:
    text = text.strip()
    if kind is AttrKind.INT:
        return int(text)
    if kind is AttrKind.FLOAT:
        return _parse_float(text)
    if kind is AttrKind.BOOL:
        return {"true": True, "false": False}[text]
    if kind is AttrKind.STR:
        return json.loads(text)
    if kind in (AttrKind.INTS, AttrKind.FLOATS, AttrKind.STRS):
        inner = text[1:-1].strip()
        if not inner:
            return ()
        if kind is AttrKind.STRS:
            return tuple(json.loads(text))
        parse = int if kind is AttrKind.INTS else _parse_float
        return tuple(parse(v) for v in inner.split(","))
    if kind is AttrKind.ELEM:
        return ElemKind(text)
    if kind is AttrKind.TYPE:
        return parse_type(text)
    match = re.match(r"^array<(\w+)>\((\[.*?\]), (\[.*\])\)$", text)
    if not match:
        raise GlowError(f"not an IR array attribute: '{text}'")
    return np.array(json.loads(match.group(3)), dtype=match.group(1)).reshape(json.loads(match.group(2)))


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets, braces, parentheses and strings."""
    parts, depth, current, quoted = [], 0, [], False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "[({<":
            depth += 1
        elif not quoted and ch in "])}>":
            depth -= 1
        if ch == "," and depth == 0 and not quoted:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return [p.strip() for p in parts]


def _parse_attrs(spec: InstrSpec, text: str, where: str) -> dict[str, Any]:
    attrs = {}
    for item in _split_top(text):
        name, _, value = item.partition("=")
        attr = spec.attr_index.get(name.strip())
        if attr is None:
            raise GlowError(f"{where}: {spec.mnemonic} has no attribute '{name.strip()}'")
        attrs[attr.name] = parse_attr(attr.kind, value)
    return attrs


def parse_ir(text: str, constants: Mapping[str, np.ndarray] | None = None) -> IRFunction:
    """Rebuild an IRFunction from its text form; GlowError with the line number if malformed."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if not lines or not lines[0].startswith("function "):
        raise GlowError("IR text must start with 'function NAME'")
    function = IRFunction(lines[0].split(None, 1)[1])
    values: dict[str, Value] = {}
    section = None
    for number, line in enumerate(lines[1:], start=2):
        where = f"line {number}"
        if not line:
            continue
        if line in ("declare {", "program {"):
            section = line.split()[0]
            continue
        if line == "}":
            section = None
            continue
        try:
            if section == "declare":
                match = _WEIGHT.match(line)
                if not match:
                    raise GlowError(f"expected '%name = weight ROLE TYPE', got '{line}'")
                name, role, type_text = match.groups()
                value = (constants or {}).get(name)
                weight = function.add_weight(name, parse_type(type_text), role, value)
                values[name] = weight
            elif section == "program":
                instr = _parse_instruction(function, line, values, where)
                values[instr.name] = instr
            else:
                raise GlowError(f"'{line}' is outside the declare and program sections")
        except (GlowError, ValueError, KeyError) as err:
            raise GlowError(f"IR {where}: {err}") from None
    return function


def _parse_instruction(function: IRFunction, line: str, values: dict[str, Value], where: str) -> Instruction:
    match = _INSTR.match(line)
    if not match:
        raise GlowError(f"expected '%name = mnemonic operands {{attrs}}', got '{line}'")
    name, mnemonic, rest = match.groups()
    spec = spec_by_mnemonic(mnemonic)
    rest = rest.strip()
    attrs: dict[str, Any] = {}
    if rest.endswith("}") and "{" in rest:
        brace = rest.index("{")
        attrs = _parse_attrs(spec, rest[brace + 1:-1], where)
        rest = rest[:brace].strip()
    operands: list[Value | None] = []
    for item in _split_top(rest) if rest else []:
        direction, _, ref = item.partition(" ")
        ref = ref.strip()
        if ref == "none":
            operands.append(None)
        elif ref.startswith("%") and ref[1:] in values:
            operands.append(values[ref[1:]])
        else:
            raise GlowError(f"operand '{ref}' is not defined before use")
    instr = function.create(spec, operands, name, **attrs)
    if instr.name != name:
        raise GlowError(f"'%{name}' is defined twice")
    slots = [s.kind.value for s in instr.operand_slots()]
    given = [item.partition(" ")[0] for item in (_split_top(rest) if rest else [])]
    if slots != given:
        raise GlowError(f"{mnemonic} takes operands {' '.join(slots) or 'none'}, got {' '.join(given) or 'none'}")
    return instr
