"""A module compiled in parts (codegen/split.py), one thread each (jit.compile_parts): the parts link
back together in the JIT, the network computes what onnxruntime computes with any number of parts,
every kernel's machine code is the one the whole module gives, and the image file and its checks
carry every object."""
from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from cpu_util import ACCUMULATE_TOL, residual_model, run_on_avx2
from onnx import helper, numpy_helper

import glowsdk
from glowsdk.backends.cpu import jit
from glowsdk.backends.cpu.codegen.split import split_module
from glowsdk.backends.cpu.image_file import ImageFileError, read_image, write_image
from glowsdk.backends.cpu.jit import (
    MAX_PARTS,
    PART_MIN_CHARS,
    JitModule,
    compile_parts,
    default_parts,
    host_machine,
    usable_cores,
)
from glowsdk.errors import UnsupportedError

PARTS = (1, 2, 3)


def network(seed: int = 0) -> tuple:
    """Convolutions (with im2col lookup tables), pooling, an activation and a residual add: a module
    of several kernels and tables to spread over parts; its feeds."""
    rng = np.random.default_rng(seed)
    weights = [numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) / 4).astype(np.float32), "w1"),
               numpy_helper.from_array((rng.standard_normal((8, 16, 1, 1)) / 4).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"]),
             helper.make_node("Sigmoid", ["c2"], ["s2"]),
             helper.make_node("Add", ["s2", "r"], ["y"])]
    return residual_model("parts", nodes, (1, 3, 32, 32), (1, 8, 8, 8), weights, rng)


def test_every_number_of_parts_computes_what_onnxruntime_computes():
    model, feeds = network()
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    for parts in PARTS:
        compiled = glowsdk.compile(glowsdk.load(model), "cpu", compile_threads=parts)
        assert len(compiled.compiled.image.objects) == parts
        # only the entry points are exported: the parts reach each other's kernels through hidden symbols
        assert {s.symbol for s in compiled.compiled.image.exports} == {
            "glowsdk_main", "glowsdk_thread", "glowsdk_run", "glowsdk_worker", "glowsdk_pool_stop"}
        got = compiled.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=ACCUMULATE_TOL * float(np.abs(want).max()))


def test_avx2_code_in_parts_computes_what_onnxruntime_computes():
    run_on_avx2(__file__, "t.test_every_number_of_parts_computes_what_onnxruntime_computes()")


def kernel_code(path: Path) -> dict[str, list[str]]:
    """Each kernel's instructions in an --dump-asm file. Labels are numbered per module and a table
    the whole module holds once (LLVM merges identical constants) is a copy in each part that reads
    it, so local labels and the symbol of a table read relative to the instruction pointer are
    left out."""
    code, name = {}, None
    for line in path.read_text().splitlines():
        label = re.match(r'^"?([A-Za-z_][^"\s:]*)"?:', line)
        if label and not line.startswith("."):
            name = label.group(1)
            code[name] = []
        elif name and line.startswith("\t") and not line.startswith("\t."):
            line = re.sub(r"\.L(BB|CPI)\d+_(\d+)", r".L\1_\2", line)
            code[name].append(re.sub(r"[\w.$]+(\+\d+)?\(%rip\)", r"TABLE\1(%rip)", line))
    return {k: v for k, v in code.items() if not k.startswith("glowsdk") and ".call" not in k and v}


def test_kernels_are_the_same_machine_code_in_any_part(tmp_path):
    """A kernel reached through its call-site functions in another part is specialised as in the whole
    module (constant arguments, dropped arguments): the same instructions whatever part it lands in."""
    model, _ = network()
    code = {}
    for parts in (1, 2):
        path = tmp_path / f"parts{parts}.s"
        glowsdk.compile(glowsdk.load(model), "cpu", compile_threads=parts, dump_asm=str(path))
        code[parts] = kernel_code(path)
    assert len(code[1]) >= 4
    assert code[1] == code[2]


def test_image_file_holds_every_object_and_rejects_a_damaged_one(tmp_path):
    model, _ = network()
    image = glowsdk.compile(glowsdk.load(model), "cpu", compile_threads=2).compiled.image
    path = tmp_path / "image.glowcpu"
    with open(path, "wb") as stream:
        write_image(stream, image, "k")
    assert read_image(path, "k").objects == image.objects
    data = bytearray(path.read_bytes())
    second = data.find(image.objects[1])
    damaged = tmp_path / "damaged.glowcpu"
    data[second + len(image.objects[1]) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(ImageFileError) as error:
        read_image(damaged, "k")
    assert str(error.value) == "section object.1 digest mismatch"
    truncated = tmp_path / "truncated.glowcpu"
    truncated.write_bytes(path.read_bytes()[:second + 10])
    with pytest.raises(ImageFileError, match=r"^section object\.1 truncated$"):
        read_image(truncated, "k")


def linked_module() -> str:
    """Two functions sharing a constant table and a mutable counter, called from an exported entry."""
    machine = host_machine()
    return f'''; ModuleID = "linked"
target triple = "{machine.triple}"
target datalayout = "{machine.target_data}"
@"table" = internal constant [4 x i32] [i32 1, i32 2, i32 3, i32 4]
@"counter" = internal global i32 0
define internal i32 @"first"(i32 %"i") noinline nounwind
{{
entry:
  %"at" = getelementptr inbounds [4 x i32], ptr @"table", i64 0, i32 %"i"
  %"value" = load i32, ptr %"at"
  %"count" = load i32, ptr @"counter"
  %"next" = add i32 %"count", 1
  store i32 %"next", ptr @"counter"
  %"sum" = add i32 %"value", %"count"
  ret i32 %"sum"
}}
define internal i32 @"second"(i32 %"i") noinline nounwind
{{
entry:
  %"at" = getelementptr inbounds [4 x i32], ptr @"table", i64 0, i32 %"i"
  %"value" = load i32, ptr %"at"
  %"tens" = mul i32 %"value", 10
  %"count" = load i32, ptr @"counter"
  %"sum" = add i32 %"tens", %"count"
  ret i32 %"sum"
}}
define i32 @"glowsdk_main"(i32 %"i") nounwind
{{
entry:
  %"a" = call i32 @"first"(i32 %"i")
  %"b" = call i32 @"second"(i32 %"i")
  %"high" = mul i32 %"a", 1000
  %"both" = add i32 %"high", %"b"
  ret i32 %"both"
}}
'''


def test_parts_copy_tables_share_mutable_globals_and_link_in_the_jit():
    text = linked_module()
    assert split_module(text, [["first"], ["second"]], 1) == [text]
    parts = split_module(text, [["first"], ["second"]], 3)
    assert len(parts) == 3
    owners = [next(i for i, part in enumerate(parts) if f'define hidden i32 @"{name}"' in part)
              for name in ("first", "second")]
    assert sorted(owners) == [1, 2]
    for owner in owners:  # each reader of the table holds a copy; the counter is defined once
        assert '@"table" = internal constant' in parts[owner]
    defined = [i for i, part in enumerate(parts) if '@"counter" = hidden global i32 0' in part]
    declared = [i for i, part in enumerate(parts) if '@"counter" = external hidden global i32' in part]
    assert len(defined) == 1 and len(declared) == 1 and set(defined + declared) == set(owners)
    compiled = compile_parts(parts)
    jit = JitModule([c.object_code for c in compiled], tuple(s for c in compiled for s in c.exports), "glowsdk_main")
    assert [jit.entry(2), jit.entry(2)] == [3031, 4032]  # table[2] = 3, the counter counts across parts


def test_split_refuses_a_unit_the_module_does_not_define():
    with pytest.raises(ValueError, match="no such function"):
        split_module(linked_module(), [["first"], ["third"]], 2)


def test_default_parts_follow_the_cores_and_the_module_size():
    assert default_parts(PART_MIN_CHARS - 1) == 1
    assert default_parts(100 * PART_MIN_CHARS) == min(usable_cores(), MAX_PARTS)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2", 17])
def test_compile_threads_must_be_a_positive_whole_number(value):
    model, _ = network()
    with pytest.raises(UnsupportedError, match="compile_threads option must be a whole number from 1 to") as error:
        glowsdk.compile(glowsdk.load(model), "cpu", compile_threads=value)
    assert "\n" not in str(error.value)


def test_compiles_on_several_threads_at_once_each_compute_what_onnxruntime_computes():
    """Two compiles at once, each in two parts: four modules in LLVM together, around llvmlite's lock."""
    models = [network(seed) for seed in (1, 2)]

    def compiled_outputs(model_feeds: tuple) -> np.ndarray:
        model, feeds = model_feeds
        return glowsdk.compile(glowsdk.load(model), "cpu", compile_threads=2).run(feeds)["y"]

    with ThreadPoolExecutor(max_workers=2) as pool:
        outputs = list(pool.map(compiled_outputs, models))
    for (model, feeds), got in zip(models, outputs):
        want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=0, atol=ACCUMULATE_TOL * float(np.abs(want).max()))


@pytest.mark.parametrize("body, says", [
    ("garbage", "expected top-level entity"),
    ("define i32 @f() {\nentry:\n  ret i64 0\n}\n", "doesn't match function result type"),
    ("define i32 @f() {\nentry:\n  %x = add i32 %y, 1\n  %y = add i32 %x, 1\n  ret i32 %x\n}\n", "does not dominate"),
])
def test_a_bad_part_fails_the_compile_in_one_line(body, says):
    """LLVM's parser and verifier, called around llvmlite's lock on the parts' threads, still name
    the first error in one line."""
    good = linked_module()
    with pytest.raises(UnsupportedError, match=f"invalid LLVM IR: .*{says}") as error:
        compile_parts([good, body])
    assert "\n" not in str(error.value)


def test_parts_compile_through_llvmlites_lock_where_its_library_cannot_be_reached(monkeypatch):
    """An llvmlite that does not expose its library's path or functions (a later release may not)
    still compiles: the locked calls give the same object bytes, parts then taking turns, and the
    default is the whole module in one part."""
    model, feeds = network()
    want = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    text = glowsdk.compile(glowsdk.load(model), "cpu", cache=False, compile_threads=1).compiled.llvm_ir
    unlocked = [o.object_code for o in compile_parts([text])]
    monkeypatch.setattr(jit.ctypes, "CDLL", _no_library)
    jit.llvm_calls.cache_clear()
    try:
        assert not jit.parallel_compiles()
        assert default_parts(100 * PART_MIN_CHARS) == 1
        assert [o.object_code for o in compile_parts([text])] == unlocked
        compiled = glowsdk.compile(glowsdk.load(model), "cpu", cache=False, compile_threads=2)
        assert len(compiled.compiled.image.objects) == 2
        got = compiled.run(feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=0, atol=ACCUMULATE_TOL * float(np.abs(want).max()))
    finally:
        monkeypatch.undo()
        jit.llvm_calls.cache_clear()
    assert jit.parallel_compiles()


def _no_library(name: object) -> None:
    raise OSError(f"cannot open shared object {name}")


def test_an_llvmlite_whose_prototypes_differ_is_called_through_its_lock():
    """A release that keeps a function's name but reorders its parameters (an older one ran the pass
    manager as (manager, builder, module)) must not be called with this module's order."""
    class Reordered(jit._Unlocked):
        PARAMETERS = {**jit._Unlocked.PARAMETERS, "LLVMPY_RunNewModulePassManager": (
            "LLVMModulePassManagerRef", "LLVMPassBuilderRef", "LLVMModuleRef")}

    with pytest.raises(AttributeError, match="LLVMPY_RunNewModulePassManager takes other parameters"):
        Reordered()
    assert isinstance(jit.llvm_calls(), jit._Unlocked)
