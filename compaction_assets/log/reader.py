"""Reading a log (SPEC §7): from any offset, as a Spark DataFrame or a Python iterator; its latest state.

Are a log's files there and readable? `check_files` checks them before a cleaning or a dry run reads them
with Spark, so that a missing or corrupt segment file is reported by its name (Spark's own error may not
name it, or name it only deep inside a Java stack trace): cheap, one Parquet footer per file.
`find_unreadable` reads every file whole and only explains a failure that the footers did not predict
(a corrupt page inside a file).
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction_assets.errors import CorruptLogError, first_line
from compaction_assets.segments import arrays, segment_task, worker_files
from compaction_assets.segments.arrays import from_numpy, to_numpy
from compaction_assets.segments.records import SEGMENT_SCHEMA, Record, rows_to_records, spark_schema
from compaction_assets.segments.segment_stats import read_segment
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment, side_files


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


@dataclass(frozen=True)
class ReadPaths:
    """How a Spark read of segments goes (the defaults are the product's; tests and the benchmark pass
    their own to send a read down the other path)."""

    # stamped files a bucket of the stamp lookup holds (a checksum picks one): a map is searched
    # linearly, so each row's work stays constant however many files are stamped (literal maps, not a
    # broadcast join: no job of its own, whose first is slow in a fresh JVM)
    stamp_bucket_files: int = 8
    # local files read by the Python workers that object stores use, not by Spark's reader: a switch so
    # the two can be measured against each other on the same data (docs/deployment.md, "Object storage")
    python_workers_read_local: bool = False
    # deletion vectors up to this many offsets are broadcast to the readers' tasks; a larger one is joined
    # by a sort-merge join, which spills: left to itself, Spark judges a vector by its compressed size (under
    # its 10 MB broadcast threshold) and broadcasts millions of offsets through the driver's heap
    broadcast_dead_max: int = 4_000_000


DEFAULT_READS = ReadPaths()
COLUMNS = ("offset", "key", "value", "timestamp", "headers", "delete_horizon")


def read_df(
    spark,
    handle: LogHandle,
    from_offset: int = 0,
    *,
    ordered: bool = True,
    manifest: Manifest | None = None,
    reads: ReadPaths = DEFAULT_READS,
):
    """Visible records at or above `from_offset` (the next surviving one onwards), in offset order."""
    from pyspark.sql import functions as F

    manifest = manifest or handle.manifest()
    start = max(from_offset, manifest.log_start_offset)
    segs = [(i, s) for i, s in enumerate(manifest.segments) if s.next_offset > start and s.files]
    df = read_segments(spark, handle, manifest, segs, reads=reads).where(F.col("offset") >= F.lit(start))
    df = df.select(*COLUMNS)
    return df.orderBy("offset") if ordered else df


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


def read_segments(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    segments: list[tuple[int, Segment]],
    *,
    with_dead: bool = False,
    reads: ReadPaths = DEFAULT_READS,
):
    """Records of the given (index, segment) pairs of `m` with the effective delete horizon (a file's
    stamp applied to its tombstones); `segment_index` finds a row's segment from its offset.

    Records in the log's deletion vector are left out, unless `with_dead` (the cleaner rebuilding it);
    the vector is read only when one of the segments has entries in it (`Segment.dead`).
    Local files are read by Spark's Parquet reader (column pruning, vectorized); files on an object
    store by pyarrow in Python workers, so no Hadoop connector (`s3a`) is needed.
    """
    from pyspark.sql import functions as F

    entries = [(ref, idx) for idx, seg in segments for ref in seg.files]
    if not entries:
        return spark.createDataFrame([], spark_schema())
    if handle.st.local and not reads.python_workers_read_local:
        df = _spark_read(spark, handle, manifest, entries, reads.stamp_bucket_files)
    else:
        df = _worker_read(spark, handle, manifest, entries)
    if manifest.deleted and not with_dead and any(seg.dead for _, seg in segments):
        # (segments without entries in the vector skip its read: a broadcast is a Spark job of its own)
        dv = side_table_df(spark, handle, side_files(manifest.deleted), schema="offset long", reads=reads)
        dv = dv.select("offset")
        small = manifest.deleted["count"] <= reads.broadcast_dead_max
        df = df.join(F.broadcast(dv) if small else dv.hint("merge"), "offset", "left_anti")
    return df


def _spark_read(spark, handle: LogHandle, manifest: Manifest, entries, bucket_files: int):
    from pyspark.sql import functions as F

    uris = [handle.spark_uri(ref.name) for ref, _ in entries]
    df = spark.read.schema(spark_schema()).parquet(*uris)
    df = df.where(F.col("offset") >= F.lit(manifest.log_start_offset))
    stamped = [(ref.name, ref.stamp) for ref, _ in entries if ref.stamp is not None]
    if not stamped:
        return df
    # Only a tombstone without its own horizon needs its file's stamp: the file's name is worked out for
    # those rows alone (a regular expression per row of the log was a second of a 2M-record scan).
    pattern = "/" + re.escape(handle.name) + "/(data/.+)$"
    needs = F.col("is_tombstone") & F.col("delete_horizon").isNull()
    df = df.withColumn("file_ref", F.when(needs, F.regexp_extract(F.col("_metadata.file_path"), pattern, 1)))
    # a literal lookup, so no Spark job: broadcasting even a small table is a job of its own (a fresh
    # JVM spent a second on one built from a Python list)
    df = df.withColumn("stamp", stamp_lookup(stamped, "file_ref", bucket_files))
    horizon = F.when(F.col("is_tombstone"), F.coalesce(F.col("delete_horizon"), F.col("stamp")))
    return df.withColumn("delete_horizon", horizon).drop("stamp", "file_ref")


def stamp_lookup(stamped: list[tuple[str, int]], name: str, bucket_files: int = DEFAULT_READS.stamp_bucket_files):
    """Spark column: the stamp of the file named in column `name` (null if unstamped), from literals.

    A map is searched linearly, so the files are spread over maps of about `bucket_files` by the
    CRC-32 of their names and a row looks in one: constant work per row however many files are stamped.
    One SQL expression (one call into the JVM, not one per literal); the values stay out of the
    generated code, so a cleaning with other files reuses the compiled plan."""
    from pyspark.sql import functions as F

    _column_name(name)
    buckets = max(1, -(-len(stamped) // bucket_files))
    groups: list[list[tuple[str, int]]] = [[] for _ in range(buckets)]
    for file_name, stamp in stamped:
        groups[zlib.crc32(file_name.encode("utf-8")) % buckets].append((file_name, int(stamp)))

    def literal(group):
        if not group:
            return "CAST(NULL AS MAP<STRING, BIGINT>)"
        return "map(" + ", ".join(f"{_sql_string(n)}, {s}L" for n, s in group) + ")"

    if buckets == 1:
        return F.expr(f"{literal(groups[0])}[{name}]")
    maps = ", ".join(literal(g) for g in groups)
    return F.expr(f"element_at(array({maps}), CAST(pmod(crc32({name}), {buckets}) AS INT) + 1)[{name}]")


def _column_name(name: str) -> str:
    """`name`, checked to be a plain column name before it is spliced into a SQL expression."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"not a column name: {name!r}")
    return name


def _sql_string(text: str) -> str:
    """A Spark SQL string literal of `text`."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ship_by_value(*modules) -> None:
    """Send the segments' worker modules (segment_task, worker_files, and arrays, which
    they use) and `modules` to Spark's Python workers with the functions that use them (by value: a worker
    needs nothing of the project installed, only pyarrow and numpy)."""
    from pyspark import cloudpickle

    for module in (arrays, segment_task, worker_files, *modules):
        cloudpickle.register_pickle_by_value(module)


def _worker_read(spark, handle: LogHandle, manifest: Manifest, entries):
    from pyspark.sql import functions as F

    # Files spread over tasks by their record counts (largest first onto the least loaded task).
    n_tasks = max(1, min(len(entries), spark.sparkContext.defaultParallelism * 2))
    tasks: list[list[tuple[str, int | None]]] = [[] for _ in range(n_tasks)]
    loads = [0] * n_tasks
    for ref, _ in sorted(entries, key=lambda e: -e[0].records):
        t = loads.index(min(loads))
        tasks[t].append((handle.path(ref.name), ref.stamp))
        loads[t] += max(ref.records, 1)
    ship_by_value()
    runner = worker_files.file_reader(tasks, handle.st.filesystem_spec(), SEGMENT_SCHEMA, manifest.log_start_offset)
    df = spark.range(0, n_tasks, 1, n_tasks).mapInArrow(runner, spark_schema())
    horizon = F.when(F.col("is_tombstone"), F.col("delete_horizon"))
    return df.withColumn("delete_horizon", horizon)


def segment_index(segments: list[tuple[int, Segment]], offset: str = "offset"):
    """Spark column: the index (of the given pairs) of the segment holding the row's offset."""
    return offset_bucket([(idx, seg.base_offset) for idx, seg in segments], offset)


def offset_bucket(starts: list[tuple[int, int]], offset: str = "offset"):
    """Spark column: the label of the last (label, first offset) pair at or below the row's offset.

    Segments (and runs of them) are contiguous offset ranges, so a balanced comparison tree on the
    offset finds a row's range (depth log2 of the ranges); meant for rows already reduced (a cleaning's
    winners), not for every record. One SQL expression: built column by column, a tree of 240 segments
    was a second of calls into the JVM."""
    from pyspark.sql import functions as F

    pairs = sorted(starts, key=lambda pair: pair[1])
    if not pairs:
        return F.lit(None).cast("int")
    _column_name(offset)

    def tree(lo: int, hi: int) -> str:
        if hi - lo == 1:
            return str(int(pairs[lo][0]))
        mid = (lo + hi) // 2
        return f"IF({offset} < {int(pairs[mid][1])}L, {tree(lo, mid)}, {tree(mid, hi)})"

    return F.expr(f"CAST({tree(0, len(pairs))} AS INT)")


def side_table_df(
    spark, handle: LogHandle, relative: str | list[str], *, schema: str | None = None, reads: ReadPaths = DEFAULT_READS
):
    """A side table (deletion vector, remembered deletes; one file or folder, or several) as a DataFrame,
    from any store; with `schema` given, Spark starts no job to infer it."""
    names = [relative] if isinstance(relative, str) else list(relative)
    if handle.st.local and not reads.python_workers_read_local:
        reader = spark.read if schema is None else spark.read.schema(schema)
        return reader.parquet(*[handle.spark_uri(name) for name in names])
    return spark.createDataFrame(pa.concat_tables([handle.st.read_parquet(handle.path(name)) for name in names]))


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
