"""The compile cache: hits run the stored code, any change of model or option misses, bad entries
are recompiled. Outputs are always checked against the interpreter."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from mlp_util import mlp

import glowsdk
from glowsdk.backends.cpu.cache import IMPORTED_SUFFIX, SUFFIX, CompileCache
from glowsdk.cli.main import main
from glowsdk.compiler import pipeline

TOL = 1e-4


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(tmp_path))
    return tmp_path / "cpu"


def compiled(seed: int = 0, **options):
    """The MLP with weights from `seed` compiled for cpu with the cache on, checked against the interpreter."""
    network = glowsdk.load(mlp(seed=seed))
    result = glowsdk.compile(network, "cpu", cache=True, **options).compiled
    feeds = network.random_inputs(1)
    want = glowsdk.compile(network, "interpreter").run(feeds)["y"]
    got = result.execute(feeds)["y"]
    assert np.abs(got - want).max() <= TOL * np.abs(want).max()
    return result


def entries(folder) -> list:
    return sorted(folder.glob(f"*{SUFFIX}"))


def test_second_compile_loads_the_stored_image(cache_dir):
    first = compiled()
    assert not first.from_cache and first.program is not None
    assert len(entries(cache_dir)) == 1
    second = compiled()
    assert second.from_cache and second.program is None
    assert second.image.objects == first.image.objects
    assert bytes(second.image.constants) == bytes(first.image.constants)
    assert second.image.bindings == first.image.bindings


def test_other_weights_or_options_miss(cache_dir):
    compiled(seed=0)
    assert not compiled(seed=1).from_cache  # same graph, other constant bytes
    assert not compiled(seed=0, stacking=False).from_cache
    assert len(entries(cache_dir)) == 3
    assert compiled(seed=1).from_cache


def test_without_the_option_nothing_is_stored(cache_dir):
    network = glowsdk.load(mlp())
    assert not glowsdk.compile(network, "cpu").compiled.from_cache
    assert entries(cache_dir) == []


def test_dump_llvm_bypasses_the_lookup(cache_dir, tmp_path):
    compiled()
    again = compiled(dump_llvm=str(tmp_path / "m.ll"))
    assert not again.from_cache and "glowsdk_main" in (tmp_path / "m.ll").read_text()


@pytest.mark.parametrize("damage", ["flip a constant byte", "flip an object byte", "truncate", "garbage"])
def test_a_damaged_entry_is_recompiled(cache_dir, damage):
    first = compiled()
    path, = entries(cache_dir)
    data = bytearray(path.read_bytes())
    if damage == "flip a constant byte":
        data[-1] ^= 0xFF
    elif damage == "flip an object byte":
        data[len(data) - first.image.constants.size - 100] ^= 0x01
    elif damage == "truncate":
        del data[len(data) // 2:]
    else:
        data[:16] = b"not a cache file"
    path.write_bytes(bytes(data))
    assert not compiled().from_cache
    assert CompileCache(cache_dir).load(path.stem) is not None  # the recompile replaced it
    assert compiled().from_cache


def test_an_entry_of_several_objects_is_checked_object_by_object(cache_dir):
    """An image compiled in two parts stores, checks and loads both objects; a damaged second one is
    recompiled (compile_threads changes no kernel, so the key is the same)."""
    first = compiled(compile_threads=2)
    assert len(first.image.objects) == 2
    loaded = compiled(compile_threads=1)
    assert loaded.from_cache and loaded.image.objects == first.image.objects
    path, = entries(cache_dir)
    data = bytearray(path.read_bytes())
    data[data.find(first.image.objects[1]) + 100] ^= 0x01
    path.write_bytes(bytes(data))
    assert CompileCache(cache_dir).load(path.stem) is None and not path.exists()
    assert not compiled(compile_threads=2).from_cache


def test_an_entry_under_another_key_is_not_trusted(cache_dir):
    compiled(seed=0)
    zero, = entries(cache_dir)
    compiled(seed=1)
    one, = set(entries(cache_dir)) - {zero}
    zero.write_bytes(one.read_bytes())  # right format, right checksums, wrong key
    assert not compiled(seed=0).from_cache
    assert compiled(seed=0).from_cache and compiled(seed=1).from_cache


def test_the_folder_is_trimmed_to_its_budget(cache_dir):
    compiled(seed=0)
    size = entries(cache_dir)[0].stat().st_size
    cache = CompileCache(cache_dir, max_bytes=size)
    network = glowsdk.load(mlp(seed=1))
    image = glowsdk.compile(network, "cpu").compiled.image
    cache.store("f" * 64, image)
    assert [p.stem for p in entries(cache_dir)] == ["f" * 64]


def test_an_unusable_cache_folder_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(blocker))
    assert not compiled().from_cache and not compiled().from_cache


def test_cli_uses_the_cache_unless_told_not_to(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    hit = "machine code loaded from the compile cache"
    assert main(["compile", str(path), "--target", "cpu"]) == 0
    assert hit not in capsys.readouterr().out
    assert main(["compile", str(path), "--target", "cpu"]) == 0
    assert hit in capsys.readouterr().out
    assert main(["compile", str(path), "--target", "cpu", "--no-cache"]) == 0
    assert hit not in capsys.readouterr().out
    assert main(["run", str(path), "--target", "cpu"]) == 0


def test_a_hit_on_the_imported_graph_skips_optimising_and_lowering(cache_dir, monkeypatch):
    first = compiled()
    record, = cache_dir.glob(f"*{IMPORTED_SUFFIX}")
    assert record.read_text() == first.cache_key

    prepare = pipeline.prepare_function

    def refuse(function, backend, **kwargs):
        assert backend.name != "cpu", "the pipeline optimised and lowered a graph the cache holds"
        return prepare(function, backend, **kwargs)

    monkeypatch.setattr(pipeline, "prepare_function", refuse)
    again = compiled()
    assert again.from_cache and again.cache_key == first.cache_key


def test_a_record_whose_entry_is_gone_compiles_afresh(cache_dir):
    compiled()
    for path in entries(cache_dir):
        path.unlink()
    again = compiled()
    assert not again.from_cache and len(entries(cache_dir)) == 1
    assert compiled().from_cache
