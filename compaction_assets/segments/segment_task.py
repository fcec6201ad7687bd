"""A cleaning's write, inside Spark's Python workers (or this process's threads), and what the workers'
tasks over segment files share: the Parquet options of segment files and deletion-vector parts, and the
store's filesystem a worker opens from the spec the driver sends (`open_filesystem`; `worker_files` reads
and writes with it too). This module imports only pyarrow, numpy and the segments' worker modules
(`arrays`): they are shipped to executors by value and need nothing of the project there.

What a segment keeps is the cleaning's decision, which arrives as offsets; these tasks only read, filter
and write the log's files. The decide phase's kept offsets arrive shuffled by unit (a run of segments
rewritten into one file, or one segment kept as it is); each task then, for the units it got:
  rewrite - streams the run's files through pyarrow, drops the records not kept and writes one new
            file for the run (segments that the cleaning merges share one file, not one each: fewer
            and larger files for every later read), so full records never pass through a shuffle;
  mark    - reads only the `offset` column of the segment's files and writes the offsets not kept
            that the log's vector does not list yet (its new entries) as one Parquet part.
A segment of the deduplicated prefix that an incremental cleaning probed (cleaning/decide/probe_task.py) arrives with
its removed offsets instead of its kept ones (`drop`): a mark then reads no file at all.
Rewrites and deletion-vector entries are one Spark job, and no intermediate file (kept offsets) is
written and listed again: on an object store every request saved is money and latency.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compaction_assets.segments.arrays import from_numpy, from_strings, in_sorted, scalar, to_numpy, visible_mask

BATCH_ROWS = 65_536
# a part of the deletion vector is sorted offsets: delta-encoded, about a byte an entry (snappy alone: 6)
DEAD_PART_OPTIONS = {
    "compression": "snappy",
    "use_dictionary": False,
    "column_encoding": {"offset": "DELTA_BINARY_PACKED"},
}


# a segment's file, appended or rewritten, holds its offsets once and its keys and timestamps nearly once:
# Arrow's default, a dictionary for every column, would hold each of them once in its dictionary, costing
# the write a hash table and every read a gather. Values, headers and the small columns keep theirs (their
# values repeat); the offsets and timestamps are delta-encoded (near a byte a row: the offsets are
# ascending, the timestamps mostly are). LZ4 (Parquet's LZ4_RAW) decompresses faster than snappy at the
# same size and the same write. Appended segments are written so too (log/writer.py): every cleaning reads
# them. Segments are read by this product only (Spark 3.3+ and pyarrow read LZ4_RAW; the topic tables
# write their own files).
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
                # can be a handful of rows, and each row group costs a file's readers its own metadata and batch
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


@dataclass(frozen=True)
class Written:
    """A file a task wrote, as a RESULT_SCHEMA row says it."""

    kind: str  # REWRITTEN or DEAD
    unit: int  # the run's unit; -1 for a part of the deletion vector
    path: str
    records: int
    bytes: int


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
        import pyarrow as pa

        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        fs = open_fs()
        out, dead = [], []
        for unit, keep in units_kept(pa.concat_tables(tables)):
            if unit in rewrites:
                path, n, size = rewrite_one(rewrites[unit], keep, fs, schema, readers=readers)
                out.append(Written(REWRITTEN, unit, path, n, size))
            elif unit in marks:
                dead.append(dead_of(marks[unit], keep, fs))
        part = write_dead_part(dead, dead_folder, fs)
        if part is not None:
            out.append(part)
        if out:
            yield result_batch(out)

    return run


def units_kept(rows):
    """(unit, its kept offsets: an int64 numpy array, ascending) for each unit of the (unit, offset) rows.

    The offsets are grouped by unit with one sort, ascending inside each unit (the membership tests
    search them), not a pass over all rows for every unit."""
    import numpy as np

    units, offsets = to_numpy(rows.column("unit")), to_numpy(rows.column("offset")).astype(np.int64)
    order = np.lexsort((offsets, units))
    units, offsets = units[order], offsets[order]
    firsts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
    for lo, hi in zip(firsts, np.r_[firsts[1:], len(units)]):
        yield int(units[lo]), offsets[lo:hi]


def write_dead_part(dead: list, dead_folder: str, fs) -> Written | None:
    """The task's new entries of the deletion vector (Arrow arrays of offsets) written as one part under
    `dead_folder`, in offset order; None when there are none."""
    import uuid

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    if not dead:
        return None
    offsets = pa.concat_arrays(dead)
    if not len(offsets):
        return None
    path = f"{dead_folder}/part-{uuid.uuid4().hex}.parquet"
    table = pa.table({"offset": pc.take(offsets, pc.sort_indices(offsets))})
    pq.write_table(table, path, filesystem=fs, **DEAD_PART_OPTIONS)
    return Written(DEAD, -1, path, len(offsets), int(fs.get_file_info(path).size or 0))


def result_batch(written: list[Written]):
    """The RESULT_SCHEMA rows of what a task wrote, as one Arrow record batch."""
    import numpy as np
    import pyarrow as pa

    return pa.RecordBatch.from_arrays(
        [
            from_strings([w.kind for w in written]),
            from_numpy(np.array([w.unit for w in written], np.int32)),
            from_strings([w.path for w in written]),
            from_numpy(np.array([w.records for w in written], np.int64)),
            from_numpy(np.array([w.bytes for w in written], np.int64)),
        ],
        names=["kind", "unit", "path", "records", "bytes"],
    )
