"""The write side of a cleaning, run inside Spark's Python workers in one job.

The decide phase's kept offsets arrive shuffled by unit (a run of segments rewritten into one file, or
one segment kept as it is); each task then, for the units it got:
  rewrite - streams the run's files through pyarrow, drops the records not kept and writes one new
            file for the run (segments that the cleaning merges share one file, not one each: fewer
            and larger files for every later read), so full records never pass through a shuffle;
  mark    - reads only the `offset` column of the segment's files and writes the offsets not kept
            that the log's vector does not list yet (its new entries) as one Parquet part.
A segment of the deduplicated prefix that an incremental cleaning probed (probe_task.py) arrives with
its removed offsets instead of its kept ones (`drop`): a mark then reads no file at all.
Rewrites and deletion-vector entries are one Spark job, and no intermediate file (kept offsets) is
written and listed again: on an object store every request saved is money and latency.
This module imports only pyarrow and `log/segment_task.py`: both are shipped to executors by value and
need nothing else of the project (the filesystem comes in as a function of segment_task, too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from compaction_assets.log.segment_task import DEAD_PART_OPTIONS, in_sorted

RESULT_SCHEMA = "kind string, unit int, path string, records long, bytes long"
REWRITTEN = "rewritten"     # `kind` of a result row: a run's new file
DEAD = "dead"               # `kind` of a result row: a part of the new deletion vector


@dataclass(frozen=True)
class RewriteSpec:
    """A run of consecutive segments to rewrite into one file: their files, the log start, the horizon
    to stamp and where to write."""
    unit: int                          # the run's label in the shuffle (`offset_bucket`)
    files: tuple[tuple[str, int | None], ...]   # (path, file stamp), in offset order
    min_offset: int                    # the log start
    horizon: int                       # delete horizon for kept tombstones that carry none
    out: str                           # path of the file to write
    drop: tuple[bool, ...] = ()        # per file: the unit's offsets in its range are the removed ones
    dead: Any = None                   # vector entries of those files' segments (numpy, ascending)


@dataclass(frozen=True)
class MarkSpec:
    """One segment kept as it is: its files, whose rows not kept go to the deletion vector (those not
    in `known_dead`, the entries the vector has for it already, when the cleaning adds to the vector)."""
    unit: int
    files: tuple[str, ...]
    min_offset: int
    known_dead: Any = None             # a numpy array of offsets (ascending), or None
    drop: bool = False                 # the unit's offsets are the removed ones (its files are not read)
    carry: Any = None                  # with `drop`: vector entries it keeps writing (the vector rebuilt)


def rewrite_one(spec: RewriteSpec, keep, fs, schema, batch_rows: int = 65_536) -> tuple[str, int, int]:
    """Rewrite one run: stream its files and keep only the offsets in `keep` (a numpy array, ascending),
    or in the files marked in `spec.drop`, all but those and the vector's entries; (path, rows, bytes)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    written = 0
    dead = spec.dead if spec.dead is not None else np.zeros(0, np.int64)
    with pq.ParquetWriter(spec.out, schema, filesystem=fs, compression="snappy") as writer:
        for n, (path, stamp) in enumerate(spec.files):
            drop = bool(spec.drop and spec.drop[n])
            pf = pq.ParquetFile(fs.open_input_file(path))
            for batch in pf.iter_batches(batch_size=batch_rows):
                table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
                offsets = table.column("offset").to_numpy()
                listed = in_sorted(offsets, keep)
                kept = ~listed & ~in_sorted(offsets, dead) if drop else listed
                table = table.filter(pa.array(kept & (offsets >= spec.min_offset)))
                if not len(table):
                    continue
                fill = spec.horizon if stamp is None else stamp
                tomb = pc.is_null(table.column("value"))
                horizon = pc.if_else(tomb, pc.coalesce(table.column("delete_horizon"), pa.scalar(fill, pa.int64())),
                                     table.column("delete_horizon"))
                table = table.set_column(schema.get_field_index("delete_horizon"), schema.field("delete_horizon"),
                                         horizon)
                writer.write_table(table)
                written += len(table)
    size = fs.get_file_info(spec.out).size
    return spec.out, written, int(size or 0)


def dead_of(spec: MarkSpec, keep, fs):
    """The offsets of a kept segment's files (at or above the log start) that are not in `keep` (a numpy
    array, ascending) nor in `spec.known_dead`; with `spec.drop`, `keep` itself (the removed offsets)
    and `spec.carry`, without reading the files."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if spec.drop:
        removed = keep if spec.known_dead is None else keep[~in_sorted(keep, spec.known_dead)]
        if spec.carry is not None:
            removed = np.union1d(removed, spec.carry)
        return pa.array(removed.astype(np.int64, copy=False), pa.int64())
    parts = []
    for path in spec.files:
        offsets = pq.ParquetFile(fs.open_input_file(path)).read(columns=["offset"]).column("offset")
        offsets = offsets.to_numpy().astype(np.int64, copy=False)
        mask = ~in_sorted(offsets, keep) & (offsets >= spec.min_offset)
        if spec.known_dead is not None:
            mask &= ~in_sorted(offsets, spec.known_dead)
        parts.append(offsets[mask])
    return pa.array(np.concatenate(parts) if parts else np.zeros(0, np.int64), pa.int64())


def apply_runner(rewrites: dict[int, RewriteSpec], marks: dict[int, MarkSpec], open_fs: Callable[[], Any], schema,
                 dead_folder: str):
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
        units, offsets = rows.column("unit").to_numpy(), rows.column("offset").to_numpy().astype(np.int64)
        order = np.lexsort((offsets, units))
        units, offsets = units[order], offsets[order]
        firsts = np.flatnonzero(np.r_[True, units[1:] != units[:-1]])
        for lo, hi in zip(firsts, np.r_[firsts[1:], len(units)]):
            unit, keep = int(units[lo]), offsets[lo:hi]
            if unit in rewrites:
                path, n, size = rewrite_one(rewrites[unit], keep, fs, schema)
                out.append({"kind": REWRITTEN, "unit": unit, "path": path, "records": n, "bytes": size})
            elif unit in marks:
                dead.append(dead_of(marks[unit], keep, fs))
        if dead:
            offsets = pa.concat_arrays(dead)
            if len(offsets):
                path = f"{dead_folder}/part-{uuid.uuid4().hex}.parquet"
                # each part of the vector is in offset order
                pq.write_table(pa.table({"offset": pc.take(offsets, pc.sort_indices(offsets))}),
                               path, filesystem=fs, **DEAD_PART_OPTIONS)
                out.append({"kind": DEAD, "unit": -1, "path": path, "records": len(offsets),
                            "bytes": int(fs.get_file_info(path).size or 0)})
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=pa.schema([
                ("kind", pa.string()), ("unit", pa.int32()), ("path", pa.string()), ("records", pa.int64()),
                ("bytes", pa.int64())]))
    return run
