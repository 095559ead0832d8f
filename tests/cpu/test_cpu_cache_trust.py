"""The compile cache runs machine code it finds on disk, so it uses only a folder nobody else can write:
a folder (or its parent) writable by group or others, or owned by someone else, is refused with one
warning and the compile goes ahead afresh; an entry that is a link, or writable by others, is not loaded."""
from __future__ import annotations

import os
import stat
import warnings

import pytest
from mlp_util import mlp

import glowsdk
from glowsdk.backends.cpu.cache import SUFFIX, CompileCache, UnsafeCacheWarning


@pytest.fixture()
def root(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("GLOWSDK_CACHE_DIR", str(folder))
    return folder


def compile_cached():
    return glowsdk.compile(glowsdk.load(mlp()), "cpu", cache=True).compiled


def entries(root) -> list:
    return sorted((root / "cpu").glob(f"*{SUFFIX}"))


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_cache_folders_are_created_private_and_used(root):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeCacheWarning)
        assert not compile_cached().from_cache
        assert compile_cached().from_cache
    assert mode(root) == 0o700 and mode(root / "cpu") == 0o700
    entry, = entries(root)
    assert mode(entry) & 0o077 == 0


@pytest.mark.parametrize("which, bits, who", [("cpu", 0o777, "its group and others"), ("cpu", 0o720, "its group"),
                                               ("root", 0o702, "others")])
def test_a_folder_others_can_write_is_refused_with_one_warning(root, which, bits, who):
    compile_cached()
    entry, = entries(root)
    stamp = entry.stat().st_mtime_ns
    folder = root / "cpu" if which == "cpu" else root
    folder.chmod(bits)
    with pytest.warns(UnsafeCacheWarning) as caught:
        again = compile_cached()
    assert not again.from_cache   # the planted-or-not entry is not run
    message, = [str(w.message) for w in caught]
    assert message.startswith(f"compile cache folder {folder} is writable by {who} (mode {bits:04o}): not used, "
                              f"compiling afresh") and "\n" not in message
    assert entries(root) == [entry] and entry.stat().st_mtime_ns == stamp   # nothing stored either
    folder.chmod(0o700)
    assert compile_cached().from_cache


def test_a_folder_owned_by_another_user_is_refused(root, monkeypatch):
    compile_cached()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(root).st_uid + 1)
    with pytest.warns(UnsafeCacheWarning, match=r"is owned by user id \d+, not by this user"):
        assert not compile_cached().from_cache


def test_an_entry_others_can_write_is_not_loaded_and_is_replaced(root):
    compile_cached()
    entry, = entries(root)
    entry.chmod(0o666)
    with pytest.warns(UnsafeCacheWarning, match=r"compile cache entry .* is writable by its group and others"):
        assert not compile_cached().from_cache
    assert mode(entry) & 0o077 == 0   # the recompile replaced it with a private file
    assert compile_cached().from_cache


def test_an_entry_that_is_a_link_is_not_loaded(root, tmp_path):
    compile_cached()
    entry, = entries(root)
    elsewhere = tmp_path / "elsewhere.glowcpu"
    entry.rename(elsewhere)
    entry.symlink_to(elsewhere)
    with pytest.warns(UnsafeCacheWarning, match="is not a regular file"):
        assert not compile_cached().from_cache
    assert not entry.is_symlink() and compile_cached().from_cache


def test_a_missing_folder_is_a_plain_miss(tmp_path):
    cache = CompileCache(tmp_path / "none" / "cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnsafeCacheWarning)
        assert cache.load("0" * 64) is None
