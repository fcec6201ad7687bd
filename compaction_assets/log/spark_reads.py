"""Reading a log (SPEC §7) as a Spark DataFrame: its records from any offset (`read_df`), a range of
segments with the effective delete horizons (`read_segments`), its side tables (`side_table_df`), and the
Spark columns that find a row's segment or run from its offset (`segment_index`, `offset_bucket`). Local
files are read by Spark's own reader, files on an object store by pyarrow in Python workers (the segments'
worker modules, shipped by value: `ship_by_value`). In this process, log/reader.py.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import pyarrow as pa

from compaction_assets.segments import arrays, segment_task, worker_files
from compaction_assets.segments.records import SEGMENT_SCHEMA, spark_schema
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment, side_files


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
