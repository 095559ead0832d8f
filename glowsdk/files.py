"""Writing files the way every glowsdk command does: names that any file system takes, and
contents that appear completely or not at all.

Contents go to a temporary file beside the destination (`tempfile.mkstemp`, which creates it
mode 0600) and are renamed over it; just before the rename the file gets the mode writing with
`open()` would have left: a new file 0666 less the process umask, a replaced file its old mode.
So outputs are as readable as any other file the user creates, and no more than one they
restricted.
"""
from __future__ import annotations

import os
import re
import stat
import tempfile
import threading

from .errors import GlowError

_umask_lock = threading.Lock()


def safe_file_name(name: str) -> str:
    """A tensor or pass name as a file name: characters a file name cannot hold become '_'."""
    cleaned = re.sub(r'[\\/:*?"<>|\x00-\x1f]', "_", name).strip(" .")
    return cleaned or "_"


def current_umask() -> int:
    """The process umask: read from /proc on Linux, without changing it; elsewhere set to 022 and
    restored at once (a file another thread creates in that instant gets umask 022)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _umask_lock:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def publish_mode(tmp: str | os.PathLike, final: str | os.PathLike) -> None:
    """Give `tmp`, made by mkstemp (mode 0600), the mode `open(final, "w")` would leave: the mode of the
    file `final` if there is one, else 0666 less the umask."""
    try:
        mode = stat.S_IMODE(os.stat(final).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~current_umask()
    os.chmod(tmp, mode)


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
        publish_mode(tmp, path)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _cannot(what: str, path: str, err: OSError):
    return GlowError(f"{what} {path}: cannot write ({err.strerror or err})")


def check_writable_file(path: str | os.PathLike, what: str) -> None:
    """GlowError now, before any work, if `path` cannot be written later (a folder, no parent)."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise GlowError(f"{what} {path}: is a folder, not a file")
    if not os.path.isdir(folder):
        raise GlowError(f"{what} {path}: no such folder {folder}")
    if not os.access(folder, os.W_OK):
        raise GlowError(f"{what} {path}: the folder {folder} is not writable")


def check_writable_folder(folder: str | os.PathLike, what: str) -> None:
    """Create `folder` if needed; GlowError now, before any work, if files cannot go into it."""
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise GlowError(f"{what} {folder}: is a file, not a folder")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as err:
        raise _cannot(what, folder, err) from None
    if not os.access(folder, os.W_OK):
        raise GlowError(f"{what} {folder}: the folder is not writable")


def write_text(path: str | os.PathLike, text: str, what: str) -> None:
    """`atomic_write` of a text file, with a one-line GlowError naming the option on failure."""
    try:
        atomic_write(path, text)
    except OSError as err:
        raise _cannot(what, os.fspath(path), err) from None


def write_arrays(folder: str | os.PathLike, arrays: dict, what: str) -> list[str]:
    """Write NAME.npy per array into `folder`, all or nothing; returns the paths written.

    bfloat16 (and other ml_dtypes kinds numpy's .npy cannot describe portably) is saved as
    float32, which holds every such value exactly.
    """
    import numpy as np

    folder = os.fspath(folder)
    check_writable_folder(folder, what)
    staged: list[tuple[str, str]] = []
    try:
        for name, value in arrays.items():
            value = np.asarray(value)
            if value.dtype.kind == "V":
                value = value.astype(np.float32)
            final = os.path.join(folder, safe_file_name(name) + ".npy")
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".partial")
            staged.append((tmp, final))
            with os.fdopen(fd, "wb") as f:
                np.save(f, value, allow_pickle=False)
            publish_mode(tmp, final)
        for tmp, final in staged:
            os.replace(tmp, final)
    except OSError as err:
        for tmp, _ in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise _cannot(what, folder, err) from None
    return [final for _, final in staged]


def load_npy(path: str | os.PathLike, what: str, mmap: bool = False):
    """The one array in a .npy file, never unpickling anything; GlowError naming `what` and the file.

    With `mmap` the data is mapped, not read (for checking shapes and dtypes up front).
    """
    import numpy as np

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
        if magic != b"\x93NUMPY":
            raise GlowError(f"{what}{path}: not a .npy file (no .npy header)")
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except FileNotFoundError:
        raise GlowError(f"{what}{path}: no such file") from None
    except IsADirectoryError:
        raise GlowError(f"{what}{path}: is a folder, not a .npy file") from None
    except (ValueError, OSError, EOFError) as err:
        raise GlowError(f"{what}{path}: not a readable .npy file ({err})") from None


def read_text_file(path: str | os.PathLike, kind: str, text_hint: str, error: type[Exception]) -> str:
    """The UTF-8 text of an input file, or `error` in one line naming the file: a folder ('is a folder, not a
    `kind`'), an unreadable file, or bytes that are not text ('not a text file (`text_hint`)')."""
    where = os.fspath(path)
    try:
        with open(where, encoding="utf-8") as f:
            return f.read()
    except IsADirectoryError:
        raise error(f"{where}: is a folder, not a {kind}") from None
    except OSError as exc:
        raise error(f"{where}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise error(f"{where}: not a text file ({text_hint})") from None
