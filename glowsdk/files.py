"""Writing files the way every glowsdk command does: names that any file system takes, and
contents that appear completely or not at all."""
from __future__ import annotations

import os
import re
import tempfile


def safe_file_name(name: str) -> str:
    """A tensor or pass name as a file name: characters a file name cannot hold become '_'."""
    cleaned = re.sub(r'[\\/:*?"<>|\x00-\x1f]', "_", name).strip(" .")
    return cleaned or "_"


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` to `path` through a temporary file beside it and a rename.

    An interrupted or failed write leaves no partial file; OSError propagates for the
    caller to report in its own words.
    """
    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
