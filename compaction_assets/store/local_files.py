"""The file operations `fs.Storage` makes on a local folder: whole files written durably and atomically, a
file created only if absent (a hard link of a fully written temporary file: atomic, and it fails if the
target exists), a file replaced or deleted only if it still holds the bytes read (under an exclusive
flock of a sidecar `<path>.cas` that every such writer takes), listings with modification times.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager


def temporary_name(path: str) -> str:
    """A fresh name beside `path` for the file that becomes it (`.tmp-` names are a writer's leftovers)."""
    head, _, tail = path.rpartition("/")
    return f"{head}/.tmp-{uuid.uuid4().hex}-{tail}"


def write_synced(path: str, data: bytes) -> None:
    """Write a whole file and flush it to the disk."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _write_temporary(path: str, data: bytes) -> str:
    """A fully written temporary file beside `path`; none left behind when the write fails (a full disk)."""
    tmp = temporary_name(path)
    try:
        write_synced(tmp, data)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return tmp


def write_atomic(path: str, data: bytes) -> None:
    """Write a whole file so that readers see the old content or the new, never a part."""
    os.replace(_write_temporary(path, data), path)


def create_exclusive(path: str, data: bytes) -> bool:
    """Create `path` with `data` unless it exists; True when this call created it."""
    tmp = _write_temporary(path, data)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        return True
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


@contextmanager
def holding(path: str, expected: bytes) -> Iterator[bool]:
    """Whether the file is still exactly `expected`, held under an exclusive flock of its sidecar (which
    every conditional writer of this path takes) until the block ends."""
    with open(path + ".cas", "a+b") as guard:
        fcntl.flock(guard.fileno(), fcntl.LOCK_EX)
        try:
            with open(path, "rb") as fh:
                unchanged = fh.read() == expected
        except FileNotFoundError:
            unchanged = False
        yield unchanged


def delete(path: str) -> None:
    """Delete a file (and its sidecar) or a folder tree; a missing path is fine."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
        return
    for p in (path, path + ".cas"):
        try:
            os.unlink(p)
        except FileNotFoundError:
            pass


def mtime_ms(path: str) -> int | None:
    """A file's modification time in ms; None when it does not exist."""
    try:
        return int(os.stat(path).st_mtime * 1000)
    except FileNotFoundError:
        return None


def files_under(path: str) -> list[str]:
    """Every file under a folder, in path order."""
    out = []
    for dirpath, _, files in os.walk(path):
        out += [os.path.join(dirpath, f) for f in files]
    return sorted(out)


def files_with_mtime(path: str) -> list[tuple[str, int]]:
    """Every file under a folder with its modification time in ms (those gone meanwhile left out)."""
    out = []
    for f in files_under(path):
        m = mtime_ms(f)
        if m is not None:
            out.append((f, m))
    return out


def files_with_sizes(path: str) -> list[tuple[str, int, int]]:
    """Every file under a folder with its modification time in ms and its size (those gone meanwhile left out)."""
    out = []
    for f in files_under(path):
        try:
            stat = os.stat(f)
        except FileNotFoundError:
            continue
        out.append((f, int(stat.st_mtime * 1000), stat.st_size))
    return out


def remove_empty_dirs(top: str) -> None:
    """Remove the empty folders under `top`, deepest first."""
    for dirpath, _, _ in os.walk(top, topdown=False):
        if dirpath != top and not os.listdir(dirpath):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass
