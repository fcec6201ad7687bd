"""Are a log's files there and readable? Checked before a cleaning or a dry run reads them with Spark,
so that a missing or corrupt segment file is reported by its name (Spark's own error may not name it,
or name it only deep inside a Java stack trace).

`check_files` is cheap (one Parquet footer per file); `find_unreadable` reads every file whole and is
used only to explain a failure that the footers did not predict (a corrupt page inside a file).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.errors import CorruptLogError
from compaction_assets.log.manifest import Manifest, side_files

REQUIRED_COLUMNS = ("offset", "key", "value", "timestamp", "record_size", "is_tombstone")


def _fs(handle):
    return None if handle.st.local else handle.st.fs


def _segment_files(m: Manifest, segments=None) -> list[tuple[str, str]]:
    """(relative file name, where it belongs) for every file of the segments (default: the manifest's)."""
    return [(ref.name, f"segment [{seg.base_offset}, {seg.next_offset})")
            for seg in (m.segments if segments is None else segments) for ref in seg.files]


def _side_tables(m: Manifest) -> list[tuple[str, str]]:
    return [(name, what) for side, what in ((m.remembered, "remembered deletes"),
                                            (m.tombstone_index, "tombstone index"),
                                            (m.deleted, "deletion vector")) for name in side_files(side)]


def _parquet_parts(handle, name: str) -> list[str]:
    """The Parquet files of a side table (a folder written by Spark, or a single file)."""
    path = handle.path(name)
    if not handle.st.is_dir(path):
        return [path]
    return [p for p in handle.st.list_files_recursive(path)
            if p.rsplit("/", 1)[-1].endswith(".parquet") and not p.rsplit("/", 1)[-1].startswith((".", "_"))]


def _unreadable(handle, name: str, what: str, reason: str) -> CorruptLogError:
    return CorruptLogError(f"log {handle.name!r}: {what} file {handle.path(name)} {reason}")


def check_files(handle, manifest: Manifest) -> None:
    """Every file the manifest references exists and has a readable Parquet footer with the segment
    columns; raises CorruptLogError naming the first file that does not."""
    for name, what in _segment_files(manifest):
        path = handle.path(name)
        if not handle.st.exists(path):
            raise _unreadable(handle, name, what, "is missing")
        try:
            schema = pq.read_schema(path, filesystem=_fs(handle))
        except (OSError, pa.ArrowException) as exc:
            raise _unreadable(handle, name, what, f"is not a readable Parquet file ({_first_line(exc)})") from None
        missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
        if missing:
            raise _unreadable(handle, name, what, f"lacks the column(s) {missing}")
    for name, what in _side_tables(manifest):
        parts = _parquet_parts(handle, name)
        # a folder of parts, or one file; an object store has no folders to ask about, only keys under
        # a prefix (so a folder is there when it lists parts, and a file when its key is)
        if parts == [handle.path(name)] and not handle.st.exists(parts[0]):
            raise _unreadable(handle, name, what, "is missing")
        for part in parts:
            try:
                pq.read_metadata(part, filesystem=_fs(handle))
            except (OSError, pa.ArrowException) as exc:
                raise CorruptLogError(f"log {handle.name!r}: {what} file {part} is not a readable Parquet "
                                      f"file ({_first_line(exc)})") from None


def find_unreadable(handle, manifest: Manifest, segments=None) -> CorruptLogError | None:
    """Read every file of `segments` (default: all of the log's) whole; the error naming the first one
    that fails, or None."""
    for name, what in _segment_files(manifest, segments):
        try:
            pq.read_table(handle.path(name), filesystem=_fs(handle))
        except (OSError, pa.ArrowException) as exc:
            return _unreadable(handle, name, what, f"cannot be read ({_first_line(exc)})")
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]
