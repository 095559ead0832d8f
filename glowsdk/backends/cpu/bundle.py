"""AOT bundles (paper 5): a compiled network as files a C program links and runs without glowsdk.

A bundle folder holds the image's position-independent object code for the
host triple and CPU: `bundle.o`, and `bundle.1.o`, `bundle.2.o`, .. when the
module was compiled in parts (codegen/split.py; a program links them all, the
parts call each other through hidden symbols); `bundle.weights`, the constant
region as raw little-endian bytes; and `bundle.h`, a generated header with the
region sizes and alignment, a table of the inputs and outputs (name, element
kind, shape, byte offset in the placeholder region), the prototype of every
function the objects export, read from the module rather than restated, and the
line that links them. The exported symbols are fixed by the module
(`glowsdk_main`), so a program links one bundle. vendor_guide/cpu_bundle.md
shows a C program using one.
"""
from __future__ import annotations

import os
import re

from ...compiler.backend import CompiledFunction
from ...errors import GlowError, UnsupportedError
from ...files import atomic_write
from ...version import __version__
from .image import ALIGNMENT, Binding, CpuImage

FILES = ("bundle.o", "bundle.weights", "bundle.h")
"""The files every bundle has (an image in parts adds `object_files`' others)."""
_PART_OBJECT = re.compile(r"bundle\.[0-9]+\.o")


def object_files(count: int) -> list[str]:
    """The names of a bundle's `count` object files: bundle.o, then bundle.1.o, bundle.2.o, .."""
    return ["bundle.o", *(f"bundle.{index}.o" for index in range(1, count))]
MAX_RANK = 8
C_ELEMENTS = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
              "uint16": "uint16_t", "int32": "int32_t", "uint32": "uint32_t", "int64": "int64_t",
              "uint64": "uint64_t", "bool": "uint8_t", "int8q": "int8_t", "uint8q": "uint8_t", "int32q": "int32_t",
              "float16": "uint16_t", "bfloat16": "uint16_t"}
"""The C type holding one element of each kind a bundle may take or return (half floats as raw bits)."""


def write_bundle(compiled: CompiledFunction, folder: str | os.PathLike, source: str) -> list[str]:
    """Write the bundle of `compiled` (a cpu-compiled function) into `folder`; the paths written."""
    image = getattr(compiled, "image", None)
    if not isinstance(image, CpuImage):
        raise GlowError("--bundle: only the cpu target writes bundles")
    header = format_header(image, source)
    folder = os.fspath(folder)
    names = object_files(len(image.objects))
    contents = [*image.objects, memoryview(image.constants), header.encode()]
    paths = [os.path.join(folder, name) for name in [*names, *FILES[1:]]]
    try:
        for path, data in zip(paths, contents):
            atomic_write(path, bytes(data))
        for stale in set(os.listdir(folder)) - set(names):
            if _PART_OBJECT.fullmatch(stale):  # a part of an earlier bundle there: linking it would clash
                os.unlink(os.path.join(folder, stale))
    except OSError as err:
        raise GlowError(f"--bundle {folder}: cannot write ({err.strerror or err})") from None
    return paths


def _c_string(text: str) -> str:
    """`text` as a C string literal: printable ASCII as is, everything else as octal UTF-8 bytes."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        out.append(f"\\{char}" if char in '"\\' else char if 32 <= byte < 127 and char != "?" else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _declarator(c_type: str, name: str) -> str:
    return f"{c_type}{name}" if c_type.endswith("*") else f"{c_type} {name}"


def _row(binding: Binding) -> str:
    t = binding.type
    if t.elem.value not in C_ELEMENTS:
        raise UnsupportedError(f"--bundle: {binding.role} {binding.name} has element kind {t.elem.value}, "
                               f"which a bundle does not take (kinds: {', '.join(C_ELEMENTS)})")
    if t.axis is not None:
        raise UnsupportedError(f"--bundle: {binding.role} {binding.name} is quantized per channel")
    if len(t.shape) > MAX_RANK:
        raise UnsupportedError(f"--bundle: {binding.role} {binding.name} has rank {len(t.shape)} > {MAX_RANK}")
    shape = ", ".join(str(d) for d in t.shape) or "0"
    scale, zero_point = (repr(float(t.scale)), t.offset) if t.scale is not None else ("0.0", 0)
    return (f"  {{{_c_string(binding.name)}, \"{t.elem.value}\", {t.elem.itemsize}, "
            f"{int(binding.role == 'input')}, {len(t.shape)}, {{{shape}}}, {binding.offset}u, {t.nbytes}u, "
            f"{scale}, {zero_point}}}, /* {C_ELEMENTS[t.elem.value]} */")


def format_header(image: CpuImage, source: str) -> str:
    """The text of bundle.h for `image`, compiled from the model `source`."""
    bindings = image.bindings
    rows = "\n".join(_row(b) for b in bindings)
    prototypes = "\n".join(f"{s.returns} {s.symbol}({', '.join(_declarator(a.c_type, a.name) for a in s.arguments)});"
                           for s in image.exports)
    inputs = sum(b.role == "input" for b in bindings)
    objects = ", ".join(object_files(len(image.objects)))
    link = " ".join(f"DIR/{name}" for name in object_files(len(image.objects)))
    return f"""/* bundle.h: generated by glowsdk {__version__} (glowsdk compile --target cpu --bundle); do not edit.
 *
 * Model: {source.replace('*/', '* /')}
 * Object code: {objects}, for {image.triple} on CPU {image.cpu} (it uses that CPU's vector features).
 * Link every one of them: cc -O2 -I DIR program.c {link} -lm
 * Weights: bundle.weights, the whole constants region (GLOWSDK_BUNDLE_CONSTANT_BYTES raw bytes).
 * Buffers: three regions, each aligned to GLOWSDK_BUNDLE_ALIGNMENT bytes; activations must start zeroed.
 * glowsdk_main: inputs go into the placeholders region at their offsets before a call, outputs are read
 * from it after. glowsdk_thread and glowsdk_run take a bindings table instead: one pointer per row of
 * glowsdk_bundle_tensors, in its order, to wherever that tensor is.
 * A function returns 0, or 1 when an index input (Gather) is out of range.
 */
#ifndef GLOWSDK_BUNDLE_H
#define GLOWSDK_BUNDLE_H

#include <stdint.h>

#define GLOWSDK_BUNDLE_ALIGNMENT {ALIGNMENT}u
#define GLOWSDK_BUNDLE_CONSTANT_BYTES {image.constants.size}u
#define GLOWSDK_BUNDLE_ACTIVATION_BYTES {image.activation_bytes}u
#define GLOWSDK_BUNDLE_PLACEHOLDER_BYTES {image.placeholder_bytes}u
#define GLOWSDK_BUNDLE_NUM_INPUTS {inputs}u
#define GLOWSDK_BUNDLE_NUM_OUTPUTS {len(bindings) - inputs}u
#define GLOWSDK_BUNDLE_MAX_RANK {MAX_RANK}u

/* An input or output. Quantized kinds (int8q, uint8q, int32q): value = (q - zero_point) * scale. */
typedef struct {{
  const char *name;      /* as in the model */
  const char *elem;      /* glowsdk element kind */
  uint32_t elem_bytes;
  int32_t is_input;
  uint32_t rank;
  int64_t shape[GLOWSDK_BUNDLE_MAX_RANK];
  uint64_t offset;       /* byte offset in the placeholders region */
  uint64_t bytes;
  double scale;
  int32_t zero_point;
}} glowsdk_bundle_tensor;

/* Inputs first, then outputs: also the order of a bindings table. */
static const glowsdk_bundle_tensor glowsdk_bundle_tensors[] = {{
{rows}
}};

/* The functions the object code exports, as its module declares them. */
{prototypes}

#endif /* GLOWSDK_BUNDLE_H */
"""
