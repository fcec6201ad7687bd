"""Segment files read and rewritten inside Spark's Python workers (or this process's threads).

Spark reads local segment files natively, but an object store needs Hadoop's connector for it (`s3a`,
`gs`, `abfs`), which not every deployment has. These tasks read the files with pyarrow instead, each
worker opening the store from its own environment (the same variables as the driver). This module
imports only pyarrow and `segments/arrays.py`: both are shipped to executors by value and need nothing of the
project there.

A cleaning's write (`apply_runner`, below) runs here too: what a segment keeps is the cleaning's
decision, which arrives as offsets; these tasks only read, filter and write the log's files. The
decide phase's kept offsets arrive shuffled by unit (a run of segments rewritten into one file, or
one segment kept as it is); each task then, for the units it got:
  rewrite - streams the run's files through pyarrow, drops the records not kept and writes one new
            file for the run (segments that the cleaning merges share one file, not one each: fewer
            and larger files for every later read), so full records never pass through a shuffle;
  mark    - reads only the `offset` column of the segment's files and writes the offsets not kept
            that the log's vector does not list yet (its new entries) as one Parquet part.
A segment of the deduplicated prefix that an incremental cleaning probed (cleaning/probe_task.py) arrives with
its removed offsets instead of its kept ones (`drop`): a mark then reads no file at all.
Rewrites and deletion-vector entries are one Spark job, and no intermediate file (kept offsets) is
written and listed again: on an object store every request saved is money and latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compaction_assets.segments.arrays import from_numpy, from_strings, scalar, to_numpy

BATCH_ROWS = 65_536
# a part of the deletion vector is sorted offsets: delta-encoded, about a byte an entry (snappy alone: 6)
DEAD_PART_OPTIONS = {
    "compression": "snappy",
    "use_dictionary": False,
    "column_encoding": {"offset": "DELTA_BINARY_PACKED"},
}


# a segment's file, appended or rewritten, holds its offsets once and its keys and timestamps nearly once:
# Arrow's default, a dictionary for every column, held each of them once in its dictionary, cost the write
# a hash table and every read a gather (a rewritten file of 483k rows: written in 282 -> 152 ms, the
# probe's columns read in 61 -> 31 ms, all columns 197 -> 77 ms, 58 -> 52 MB). Values, headers and the
# small columns keep theirs (their values repeat); the offsets and timestamps are delta-encoded (near a byte
# a row: the offsets are ascending, the timestamps mostly are). LZ4 (Parquet's LZ4_RAW) decompresses in
# half snappy's time at the same size and the same write (that file's probe columns 43 -> 27 ms of CPU).
# Appended segments are written so too (log/writer.py): every cleaning reads them (a forced cleaning of
# 20M records: 13.5 -> 11.5 s; 50M generated in 90 -> 54 s). Segments are read by this product only
# (Spark 3.3+ and pyarrow read LZ4_RAW; the topic tables write their own files).
SEGMENT_OPTIONS = {
    "compression": "lz4",
    "use_dictionary": [
        "value",
        "headers.list.element.name",
        "headers.list.element.value",
        "delete_horizon",
        "record_size",
        "is_tombstone",
    ],
    "column_encoding": {"offset": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED"},
}


def in_sorted(values, sorted_set):
    """A numpy mask: whether each of `values` (int64) is in `sorted_set` (a numpy array, ascending).

    A binary search per value: Arrow's `is_in` builds a hash set of its value set on every call, so
    filtering many files or batches against one set of offsets rebuilt it each time (a forced cleaning
    of 5M records spent more CPU on that than on reading its files)."""
    import numpy as np

    values = np.asarray(values)
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def visible_mask(offsets, min_offset: int | None, dead=None):
    """A numpy mask: whether each of `offsets` is visible, at or above the log start `min_offset` and not
    in the deletion vector `dead` (ascending numpy array, or None)."""
    import numpy as np

    visible = offsets >= min_offset if min_offset is not None else np.ones(len(offsets), dtype=bool)
    if dead is not None and len(dead):
        visible &= ~in_sorted(offsets, dead)
    return visible


def bucket_labels(starts: list[tuple[int, int]], offsets):
    """Numpy: the label of the last (label, first offset) pair at or below each offset (an int64
    array), as `offset_bucket` (log/reader.py) computes it in Spark (every offset at or above the lowest
    first offset)."""
    import numpy as np

    pairs = sorted(starts, key=lambda pair: pair[1])
    firsts = np.array([first for _, first in pairs], dtype=np.int64)
    labels = np.array([label for label, _ in pairs], dtype=np.int32)
    return labels[np.searchsorted(firsts, offsets, side="right") - 1]


def open_filesystem(spec: tuple[str, str | None, dict[str, Any]]):
    """The pyarrow filesystem a worker reads with (see `fs.Storage.filesystem_spec`)."""
    import pyarrow.fs as pafs

    kind, bucket, options = spec
    if kind == "local":
        return pafs.LocalFileSystem()
    if kind == "s3":
        return pafs.S3FileSystem(
            region=options.get("region") or "us-east-1",
            endpoint_override=options.get("endpoint_url"),
            access_key=options.get("access_key"),
            secret_key=options.get("secret_key"),
            session_token=options.get("session_token"),
        )
    return pafs.FileSystem.from_uri(f"{kind}://{bucket}")[0]


def file_reader(tasks: list[list[tuple[str, int | None]]], fs_spec, schema, min_offset: int):
    """The function for `mapInArrow` over `spark.range(len(tasks))`: task i streams the files of
    tasks[i] ((path, file stamp) each) as SEGMENT_SCHEMA rows, below `min_offset` left out and the
    file stamp applied to tombstones that carry no horizon."""

    def run(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        fs = open_filesystem(fs_spec)
        horizon_at = schema.get_field_index("delete_horizon")
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for path, stamp in tasks[task]:
                    pf = pq.ParquetFile(fs.open_input_file(path))
                    for rows in pf.iter_batches(batch_size=BATCH_ROWS):
                        table = pa.Table.from_batches([rows]).select(schema.names).cast(schema)
                        table = table.filter(pc.greater_equal(table.column("offset"), min_offset))
                        if not len(table):
                            continue
                        if stamp is not None:
                            horizon = pc.if_else(
                                table.column("is_tombstone"),
                                pc.coalesce(table.column("delete_horizon"), scalar(stamp)),
                                table.column("delete_horizon"),
                            )
                            table = table.set_column(horizon_at, schema.field("delete_horizon"), horizon)
                        yield from table.to_batches()

    return run


def file_writer(fs_spec, folder: str, partition_by: str | None):
    """The function for `DataFrame.mapInArrow`: each Spark partition writes its rows as one Parquet file
    under `folder` (one per value of `partition_by` in `folder/<col>=<value>/`, the column left out, as
    Spark's own writer lays it out). Yields (path, rows) of what it wrote."""

    def run(batches):
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        fs = open_filesystem(fs_spec)
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        groups = [(folder, table)]
        if partition_by is not None:
            groups = []
            for value in pc.unique(table.column(partition_by)).to_pylist():
                part = table.filter(pc.equal(table.column(partition_by), value)).drop_columns([partition_by])
                groups.append((f"{folder}/{partition_by}={value}", part))
        out = []
        for where, part in groups:
            path = f"{where}/part-{uuid.uuid4().hex}.parquet"
            if kind_is_local(fs_spec):
                import os

                os.makedirs(where, exist_ok=True)
            pq.write_table(part, path, filesystem=fs, compression="snappy")
            out.append((path, len(part)))
        yield pa.RecordBatch.from_pylist(
            [{"path": p, "rows": n} for p, n in out], schema=pa.schema([("path", pa.string()), ("rows", pa.int64())])
        )

    return run


def kind_is_local(fs_spec) -> bool:
    """True for the local filesystem's spec."""
    return fs_spec[0] == "local"


RESULT_SCHEMA = "kind string, unit int, path string, records long, bytes long"
REWRITTEN = "rewritten"  # `kind` of a result row: a run's new file
DEAD = "dead"  # `kind` of a result row: a part of the new deletion vector


@dataclass(frozen=True)
class RewriteSpec:
    """A run of consecutive segments to rewrite into one file: their files, the log start, the horizon
    to stamp and where to write."""

    unit: int  # the run's label in the shuffle (`offset_bucket`)
    files: tuple[tuple[str, int | None], ...]  # (path, file stamp), in offset order
    min_offset: int  # the log start
    horizon: int  # delete horizon for kept tombstones that carry none
    out: str  # path of the file to write
    drop: tuple[bool, ...] = ()  # per file: the unit's offsets in its range are the removed ones
    dead: Any = None  # vector entries of those files' segments (numpy, ascending)


@dataclass(frozen=True)
class MarkSpec:
    """One segment kept as it is: its files, whose rows not kept go to the deletion vector (those not
    in `known_dead`, the entries the vector has for it already, when the cleaning adds to the vector)."""

    unit: int
    files: tuple[str, ...]
    min_offset: int
    known_dead: Any = None  # a numpy array of offsets (ascending), or None
    drop: bool = False  # the unit's offsets are the removed ones (its files are not read)
    carry: Any = None  # with `drop`: vector entries it keeps writing (the vector rebuilt)


def rewrite_one(
    spec: RewriteSpec, keep, fs, schema, batch_rows: int = 65_536, readers: int = 1
) -> tuple[str, int, int]:
    """Rewrite one run: stream its files and keep only the offsets in `keep` (a numpy array, ascending),
    or in the files marked in `spec.drop`, all but those and the vector's entries; (path, rows, bytes).
    `readers` threads read and filter the run's files ahead, in order, while this one writes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def survivors(n: int):  # read ahead: a file's whole survivors; else streamed a batch at a time
        rows = _survivors(spec, n, keep, fs, schema, batch_rows)
        return list(rows) if readers > 1 else rows

    written, pending, pending_rows = 0, [], 0
    with pq.ParquetWriter(spec.out, schema, filesystem=fs, **SEGMENT_OPTIONS) as writer:
        # the first segments of a forced cleaning are mostly dead and merge into one run (50M records: 150
        # files, 38M rows read, for one file of 0.5M rows): read by one thread, that run was the write's
        # whole length while the other cores had finished theirs
        for tables in in_order(survivors, len(spec.files), readers):
            for table in tables:
                pending.append(table)
                pending_rows += len(table)
                written += len(table)
                # kept rows are gathered into row groups of at least a read batch: a batch's survivors
                # can be a handful of rows, and a file of hundreds of tiny row groups reads 3 times slower
                if pending_rows >= batch_rows:
                    writer.write_table(pa.concat_tables(pending))
                    pending, pending_rows = [], 0
        if pending:
            writer.write_table(pa.concat_tables(pending))
    size = fs.get_file_info(spec.out).size
    return spec.out, written, int(size or 0)


def in_order(work: Callable[[int], Any], count: int, threads: int):
    """work(0), ..., work(count - 1) in order, computed by `threads` threads at most `threads` ahead of the
    one being consumed (what is held: those results and the one consumed)."""
    if threads <= 1 or count <= 1:
        yield from map(work, range(count))
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rewrite-read") as pool:
        ahead = deque(pool.submit(work, n) for n in range(min(threads, count)))
        following = len(ahead)
        try:
            while ahead:
                result = ahead.popleft().result()
                if following < count:
                    ahead.append(pool.submit(work, following))
                    following += 1
                yield result
        finally:  # an early stop (a failed write) leaves nothing running
            for future in ahead:
                future.cancel()


def _survivors(spec: RewriteSpec, n: int, keep, fs, schema, batch_rows: int):
    """The rows of the run's file `n` that the rewrite keeps (tombstones given their horizon), a table a
    read batch as they are read."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    path, stamp = spec.files[n]
    drop = bool(spec.drop and spec.drop[n])
    dead = spec.dead if spec.dead is not None else np.zeros(0, np.int64)
    fill = spec.horizon if stamp is None else stamp
    for batch in pq.ParquetFile(fs.open_input_file(path)).iter_batches(batch_size=batch_rows):
        table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
        offsets = to_numpy(table.column("offset"))
        listed = in_sorted(offsets, keep)
        kept = ~listed & ~in_sorted(offsets, dead) if drop else listed
        table = table.filter(from_numpy(kept & (offsets >= spec.min_offset)))
        if not len(table):
            continue
        tomb = pc.is_null(table.column("value"))
        horizon = pc.if_else(
            tomb, pc.coalesce(table.column("delete_horizon"), scalar(fill)), table.column("delete_horizon")
        )
        yield table.set_column(schema.get_field_index("delete_horizon"), schema.field("delete_horizon"), horizon)


def dead_of(spec: MarkSpec, keep, fs):
    """The offsets of a kept segment's files (at or above the log start) that are not in `keep` (a numpy
    array, ascending) nor in `spec.known_dead`; with `spec.drop`, `keep` itself (the removed offsets)
    and `spec.carry`, without reading the files."""
    import numpy as np
    import pyarrow.parquet as pq

    if spec.drop:
        removed = keep if spec.known_dead is None else keep[~in_sorted(keep, spec.known_dead)]
        if spec.carry is not None:
            removed = np.union1d(removed, spec.carry)
        return from_numpy(removed.astype(np.int64, copy=False))
    parts = []
    for path in spec.files:
        offsets = pq.ParquetFile(fs.open_input_file(path)).read(columns=["offset"]).column("offset")
        offsets = to_numpy(offsets).astype(np.int64, copy=False)
        parts.append(offsets[~in_sorted(offsets, keep) & visible_mask(offsets, spec.min_offset, spec.known_dead)])
    return from_numpy(np.concatenate(parts) if parts else np.zeros(0, np.int64))


def apply_runner(
    rewrites: dict[int, RewriteSpec],
    marks: dict[int, MarkSpec],
    open_fs: Callable[[], Any],
    schema,
    dead_folder: str,
    readers: int = 1,
):
    """The function for `mapInArrow` over (unit, offset) rows of kept records, shuffled by unit: each
    task rewrites its runs of `rewrites` and writes the dead offsets of its segments of `marks` as one
    part under `dead_folder`. `open_fs()` gives the task its pyarrow filesystem (the one the
    workers' reads use, with the driver's store settings). Yields RESULT_SCHEMA rows of what it wrote."""

    def run(batches):
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        import numpy as np

        rows = pa.concat_tables(tables)
        fs = open_fs()
        out, dead = [], []
        # the offsets grouped by unit with one sort, ascending inside each unit (the membership tests
        # search them), not a pass over all rows for every unit
        units, offsets = to_numpy(rows.column("unit")), to_numpy(rows.column("offset")).astype(np.int64)
        order = np.lexsort((offsets, units))
        units, offsets = units[order], offsets[order]
        firsts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
        for lo, hi in zip(firsts, np.r_[firsts[1:], len(units)]):
            unit, keep = int(units[lo]), offsets[lo:hi]
            if unit in rewrites:
                path, n, size = rewrite_one(rewrites[unit], keep, fs, schema, readers=readers)
                out.append({"kind": REWRITTEN, "unit": unit, "path": path, "records": n, "bytes": size})
            elif unit in marks:
                dead.append(dead_of(marks[unit], keep, fs))
        if dead:
            offsets = pa.concat_arrays(dead)
            if len(offsets):
                path = f"{dead_folder}/part-{uuid.uuid4().hex}.parquet"
                # each part of the vector is in offset order
                pq.write_table(
                    pa.table({"offset": pc.take(offsets, pc.sort_indices(offsets))}),
                    path,
                    filesystem=fs,
                    **DEAD_PART_OPTIONS,
                )
                out.append(
                    {
                        "kind": DEAD,
                        "unit": -1,
                        "path": path,
                        "records": len(offsets),
                        "bytes": int(fs.get_file_info(path).size or 0),
                    }
                )
        if out:
            yield pa.RecordBatch.from_arrays(
                [
                    from_strings([o["kind"] for o in out]),
                    from_numpy(np.array([o["unit"] for o in out], np.int32)),
                    from_strings([o["path"] for o in out]),
                    from_numpy(np.array([o["records"] for o in out], np.int64)),
                    from_numpy(np.array([o["bytes"] for o in out], np.int64)),
                ],
                names=["kind", "unit", "path", "records", "bytes"],
            )

    return run
