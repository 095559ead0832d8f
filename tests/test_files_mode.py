"""Files glowsdk writes get the mode the user's umask gives any new file (mkstemp's 0600 is not kept)."""
from __future__ import annotations

import os
import stat

import numpy as np
import pytest

from glowsdk.files import atomic_write, current_umask, write_arrays, write_text

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


@pytest.fixture()
def umask():
    """Set the process umask for one test, restoring it after."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield lambda mask: os.umask(mask)
    os.umask(saved)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664), (0o000, 0o666)])
def test_written_files_follow_the_umask(tmp_path, umask, mask, want):
    umask(mask)
    assert current_umask() == mask
    atomic_write(tmp_path / "a.bin", b"\x00\x01")
    write_text(tmp_path / "b.json", "{}\n", "--json")
    arrays = write_arrays(tmp_path / "arrays", {"x": np.zeros(3, np.float32)}, "--dump")
    assert [mode(tmp_path / "a.bin"), mode(tmp_path / "b.json"), mode(arrays[0])] == [want] * 3
    assert (tmp_path / "a.bin").read_bytes() == b"\x00\x01"


@pytest.mark.parametrize("old", [0o600, 0o640, 0o664])
def test_a_replaced_file_keeps_its_mode_as_open_would_and_no_partial_file_stays(tmp_path, umask, old):
    umask(0o022)
    target = tmp_path / "out.txt"
    target.write_text("old")
    target.chmod(old)
    atomic_write(target, "new")
    assert target.read_text() == "new" and mode(target) == old
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
