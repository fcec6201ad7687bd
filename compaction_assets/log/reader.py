"""Reading a log (SPEC §7) in this process: a segment file's visible records (log start, deletion vector and
file stamps applied: `read_file`), the deletion vector (`dead_offsets`), the records from any offset as a
Python iterator; as a Spark DataFrame, log/spark_reads.py.

Are a log's files there and readable? `check_files` checks them before a cleaning or a dry run reads them
with Spark, so that a missing or corrupt segment file is reported by its name (Spark's own error may not
name it, or name it only deep inside a Java stack trace): cheap, one Parquet footer per file.
`find_unreadable` reads every file whole and only explains a failure that the footers did not predict
(a corrupt page inside a file).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction_assets.errors import CorruptLogError, first_line
from compaction_assets.segments.arrays import from_numpy, scalar, to_numpy, visible_mask
from compaction_assets.segments.records import SEGMENT_SCHEMA, Record, rows_to_records
from compaction_assets.segments.segment_stats import chunk_stats
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Manifest, Segment, new_id, side_files


def dead_offsets(handle, manifest) -> pa.Array | None:
    """The log's deletion vector, ascending: offsets a cleaning removed from files it kept (None when
    there are none). Sorted once here, so that every file read against it is a binary search."""
    if not manifest.deleted:
        return None
    parts = [
        handle.st.read_parquet(handle.path(name), columns=["offset"]).column("offset")
        for name in side_files(manifest.deleted)
    ]
    offsets = pa.chunked_array([c for p in parts for c in p.chunks], pa.int64()).combine_chunks()
    return from_numpy(np.sort(to_numpy(offsets)).astype(np.int64, copy=False))


def iter_records(handle: LogHandle, from_offset: int = 0, manifest: Manifest | None = None) -> Iterator[Record]:
    """A small-reader iterator over visible records from `from_offset`, one segment in memory at a time."""
    manifest = manifest or handle.manifest()
    start = max(from_offset, manifest.log_start_offset)
    dead = dead_offsets(handle, manifest)
    for seg in manifest.segments:
        if seg.next_offset <= start or not seg.files:
            continue
        table = read_segment(handle, seg, manifest.log_start_offset, dead)
        table = table.filter(pc.greater_equal(table.column("offset"), start))
        yield from rows_to_records(table)


def segment_records(handle: LogHandle, manifest: Manifest) -> list[tuple[object, list[Record]]]:
    """Every segment with its visible records (for describing small logs and the conformance output)."""
    dead = dead_offsets(handle, manifest)
    return [
        (seg, rows_to_records(read_segment(handle, seg, manifest.log_start_offset, dead)) if seg.files else [])
        for seg in manifest.segments
    ]


REQUIRED_COLUMNS = ("offset", "key", "value", "timestamp", "record_size", "is_tombstone")


def _fs(handle):
    return None if handle.st.local else handle.st.fs


def _segment_files(m: Manifest, segments=None) -> list[tuple[str, str]]:
    """(relative file name, where it belongs) for every file of the segments (default: the manifest's)."""
    return [
        (ref.name, f"segment [{seg.base_offset}, {seg.next_offset})")
        for seg in (m.segments if segments is None else segments)
        for ref in seg.files
    ]


def _side_tables(m: Manifest) -> list[tuple[str, str]]:
    return [
        (name, what)
        for side, what in (
            (m.remembered, "remembered deletes"),
            (m.tombstone_index, "tombstone index"),
            (m.deleted, "deletion vector"),
        )
        for name in side_files(side)
    ]


def _parquet_parts(handle, name: str) -> list[str]:
    """The Parquet files of a side table (a folder written by Spark, or a single file)."""
    path = handle.path(name)
    if not handle.st.is_dir(path):
        return [path]
    return [
        p
        for p in handle.st.list_files_recursive(path)
        if p.rsplit("/", 1)[-1].endswith(".parquet") and not p.rsplit("/", 1)[-1].startswith((".", "_"))
    ]


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
            raise _unreadable(handle, name, what, f"is not a readable Parquet file ({first_line(exc)})") from None
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
                raise CorruptLogError(
                    f"log {handle.name!r}: {what} file {part} is not a readable Parquet file ({first_line(exc)})"
                ) from None


def find_unreadable(handle, manifest: Manifest, segments=None) -> CorruptLogError | None:
    """Read every file of `segments` (default: all of the log's) whole; the error naming the first one
    that fails, or None."""
    for name, what in _segment_files(manifest, segments):
        try:
            pq.read_table(handle.path(name), filesystem=_fs(handle))
        except (OSError, pa.ArrowException) as exc:
            return _unreadable(handle, name, what, f"cannot be read ({first_line(exc)})")
    return None


def read_file(
    handle,
    ref: FileRef,
    min_offset: int | None = None,
    dead: pa.Array | None = None,
    columns: tuple[str, ...] | None = None,
) -> pa.Table:
    """One segment file as SEGMENT_SCHEMA (or its `columns`, with offset and is_tombstone among them) with
    the file's stamp applied to tombstones without a horizon, without the records of the deletion vector
    `dead` (ascending, as `dead_offsets` gives it)."""
    schema = SEGMENT_SCHEMA if columns is None else pa.schema([SEGMENT_SCHEMA.field(c) for c in columns])
    try:
        table = handle.st.read_parquet(handle.path(ref.name), columns=list(schema.names), schema=schema)
    except (OSError, pa.ArrowException) as exc:  # named, not "unexpected ArrowInvalid"
        lines = str(exc).strip().splitlines()
        raise CorruptLogError(
            f"log {handle.name!r}: segment file {handle.path(ref.name)} cannot be read "
            f"({(lines[0] if lines else type(exc).__name__)[:300]})"
        ) from None
    table = _visible(table, min_offset, dead)
    if ref.stamp is not None and len(table) and "delete_horizon" in schema.names:
        hz = table.column("delete_horizon")
        fill = pc.if_else(table.column("is_tombstone"), scalar(ref.stamp), scalar(None))
        table = table.set_column(
            table.schema.get_field_index("delete_horizon"), "delete_horizon", pc.coalesce(hz, fill)
        )
    return table


def _visible(table: pa.Table, min_offset: int | None, dead: pa.Array | None) -> pa.Table:
    """`table` without its records below `min_offset` or in `dead`: one filter, and none when every record
    is visible (a filter copies each column, even when it keeps every row: the values of a latest state
    were copied twice more than they needed to be, and first-touched memory is slow on small machines)."""
    if not len(table) or (min_offset is None and (dead is None or not len(dead))):
        return table
    visible = visible_mask(to_numpy(table.column("offset")), min_offset, None if dead is None else to_numpy(dead))
    return table if visible.all() else table.filter(from_numpy(visible))


def read_segment(handle, seg: Segment, min_offset: int | None = None, dead: pa.Array | None = None) -> pa.Table:
    """One segment's visible records as an Arrow table (log start and deletion vector applied)."""
    tables = [read_file(handle, f, min_offset, dead) for f in seg.files]
    return pa.concat_tables(tables) if tables else SEGMENT_SCHEMA.empty_table()


def restat(handle, seg: Segment, min_offset: int, dead: pa.Array | None = None) -> Segment:
    """Recompute a segment's stats over its records at or above `min_offset` (log-start moves)."""
    stats = chunk_stats(read_segment(handle, seg, min_offset, dead))
    return Segment(
        id=new_id(), base_offset=seg.base_offset, next_offset=seg.next_offset, files=seg.files, dead=seg.dead, **stats
    )
