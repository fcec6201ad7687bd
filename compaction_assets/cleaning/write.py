"""The write: one job writes what a decision changed, full records never shuffled (its tasks:
segments/segment_task.py's `apply_runner`).

Runs of segments are rewritten in Python workers (a file a run); the offsets that segments kept as they
are lose become parts of the new deletion vector. Only the kept offsets of those segments travel (to the
task of their unit). The job runs in Spark's Python workers on a cluster, in this process's threads
under a local master or when the write is small (the cleaning's `Placement`, by its kept offsets).

The vector grows by a file of this cleaning's new entries (written in proportion to the change), and is
rebuilt whole when it has `dead_vector_max_files` files or more than half its entries are stale (of
segments since rewritten, emptied or below the log start).
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.decide.decision import CachedDecision, CleaningStats, Decision
from compaction_assets.cleaning.decide.placement import Placement
from compaction_assets.cleaning.decide.spark_tasks import parallelism
from compaction_assets.cleaning.layout import RewritePlan
from compaction_assets.cleaning.tuning import CleanerTuning
from compaction_assets.log.side_tables import vector_entries, write_vector_part
from compaction_assets.log.spark_reads import offset_bucket, ship_by_value
from compaction_assets.segments import segment_task
from compaction_assets.segments.arrays import bucket_labels, from_numpy, to_numpy
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Manifest, Segment, side_files, side_table_name


@dataclass
class Applied:
    """What the write job of a cleaning wrote: runs' new files and the new deletion vector."""

    written: dict[int, tuple[FileRef, int]]  # run index -> (its new file, bytes)
    deleted: dict[str, Any] | None  # {"files", "count"} of the new deletion vector, or None
    stats: CleaningStats  # the decision's totals with the write's figures
    threads: int | None = None  # where the job ran: threads here, 0 for Python workers,
    # None when there was nothing to write


@dataclass(frozen=True)
class VectorPlan:
    """How a cleaning leaves the deletion vector: a file of its new entries added, or the vector rebuilt."""

    old: np.ndarray | None  # the old vector's entries, ascending (`dead_offsets`)
    old_files: list[str]
    add: bool  # add this cleaning's entries as a new file (else rebuild it whole)
    folder: str  # where this cleaning's entries go
    carried: list[int]  # range segments that keep their files and their entries untouched

    def entries_of(self, seg: Segment) -> np.ndarray | None:
        """The old vector's entries of `seg`, or None."""
        return vector_entries(self.old, seg)


@dataclass(frozen=True)
class WriteUnits:
    """The write job's units: runs first (label = run index), then the marked segments; each a contiguous
    offset range."""

    rewrites: dict[int, segment_task.RewriteSpec]
    marks: dict[int, segment_task.MarkSpec]
    starts: list[tuple[int, int]]  # (unit, its first offset)
    members: list[int]  # the range segments the units cover
    rows: dict[int, int]  # the rows each unit reads (a probed segment's mark reads none)

    def rewrite_rows(self) -> int:
        """Rows the rewrites read."""
        return sum(self.rows[r] for r in self.rewrites)


def apply(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    decision: Decision,
    range_segs: list[Segment],
    plan: RewritePlan,
    old_vector: Callable[[], pa.Array | None],
    tuning: CleanerTuning,
    placement: Placement,
) -> Applied:
    """Write what `decision` changed as `plan` lays it out, where `placement` says for the offsets it
    keeps; the new files and the new deletion vector. `old_vector()` reads the log's deletion vector
    (`dead_offsets`)."""
    vector = vector_plan(manifest, decision, range_segs, plan.mark, old_vector(), tuning)
    written: dict[int, tuple[FileRef, int]] = {}
    count, threads = 0, None
    if plan.runs or plan.mark:
        work_dir = f"data/clean-{uuid.uuid4().hex}"
        units = write_units(handle, manifest, decision, range_segs, plan, vector, work_dir)
        if plan.runs:  # local files only (object stores have no folders); a cleaning that marks writes none
            handle.st.makedirs(handle.path(work_dir))
        if plan.mark:
            handle.st.makedirs(handle.path(vector.folder))
        mark_rows = sum(units.rows.values()) - units.rewrite_rows()
        threads = placement.write_threads(spark, units.rewrite_rows(), mark_rows, decision.stats.records_written)
        results = _run_job(spark, handle, decision, units, vector.folder, threads, tuning)
        written, count = _results(handle, results)
    deleted = new_vector(handle, manifest, range_segs, vector, count)
    stats = replace(
        decision.stats,
        segments_rewritten=sum(len(run) for run in plan.runs),
        segments_marked=len(plan.mark),
        records_rewritten=sum(ref.records for ref, _ in written.values()),
        files_bytes_written=sum(size for _, size in written.values()),
        deletion_vector_records=(deleted or {}).get("count", 0),
    )
    return Applied(written, deleted, stats, threads)


def vector_plan(
    manifest: Manifest,
    decision: Decision,
    range_segs: list[Segment],
    mark: list[int],
    old: pa.Array | None,
    tuning: CleanerTuning,
) -> VectorPlan:
    """Whether this cleaning adds to the vector or rebuilds it: adds while the files are few and at most
    half the old entries are stale."""
    range_end = range_segs[-1].next_offset
    old_files = side_files(manifest.deleted)
    carried = [i for i, p in decision.figures.items() if p.unchanged]
    # the old entries still in force after this cleaning: those of segments kept as they are
    useful = sum(s.dead for s in manifest.segments if s.base_offset >= range_end) + sum(
        range_segs[i].dead for i in (*mark, *carried)
    )
    stale = (len(old) if old is not None else 0) - useful
    add = old is not None and len(old_files) < tuning.dead_vector_max_files and stale <= useful
    return VectorPlan(to_numpy(old) if old is not None else None, old_files, add, side_table_name("deleted"), carried)


def write_units(
    handle: LogHandle,
    manifest: Manifest,
    decision: Decision,
    range_segs: list[Segment],
    plan: RewritePlan,
    vector: VectorPlan,
    work_dir: str,
) -> WriteUnits:
    """The units of the write job: a RewriteSpec per run, a MarkSpec per marked segment."""
    drop = decision.probed_segments()
    runs, start = plan.runs, manifest.log_start_offset

    def dropped(run: list[int]):
        parts = [e for i in run if i in drop and (e := vector.entries_of(range_segs[i])) is not None]
        return np.concatenate(parts) if parts else None

    rewrites = {
        r: segment_task.RewriteSpec(
            unit=r,
            files=tuple((handle.path(f.name), f.stamp) for i in run for f in range_segs[i].files),
            min_offset=start,
            horizon=decision.new_horizon,
            out=handle.path(f"{work_dir}/run-{run[0]}-{run[-1]}.parquet"),
            drop=tuple(i in drop for i in run for _ in range_segs[i].files),
            dead=dropped(run),
        )
        for r, run in enumerate(runs)
    }
    marks = {
        len(runs) + k: segment_task.MarkSpec(
            unit=len(runs) + k,
            files=tuple(handle.path(f.name) for f in range_segs[i].files),
            min_offset=start,
            known_dead=vector.entries_of(range_segs[i]) if vector.add else None,
            drop=i in drop,
            carry=None if vector.add or i not in drop else vector.entries_of(range_segs[i]),
        )
        for k, i in enumerate(plan.mark)
    }
    starts = [(r, range_segs[run[0]].base_offset) for r, run in enumerate(runs)] + [
        (len(runs) + k, range_segs[i].base_offset) for k, i in enumerate(plan.mark)
    ]
    rows = {
        **{r: sum(range_segs[i].physical_rows for i in run) for r, run in enumerate(runs)},
        **{len(runs) + k: 0 if i in drop else range_segs[i].physical_rows for k, i in enumerate(plan.mark)},
    }
    return WriteUnits(rewrites, marks, starts, [i for run in runs for i in run] + list(plan.mark), rows)


def _run_job(
    spark,
    handle: LogHandle,
    decision: Decision,
    units: WriteUnits,
    dead_folder: str,
    threads: int,
    tuning: CleanerTuning,
) -> list[dict]:
    """The write job's task function over the units' kept offsets: here in `threads` threads, or (0) in
    Spark's Python workers, about two tasks a core."""
    # the workers open the store as their reads do: the driver's settings travel with the task
    open_fs = functools.partial(segment_task.open_filesystem, handle.st.filesystem_spec())
    # here, the write's threads also read each run's files ahead of its writer (a run is one thread's
    # otherwise); a Python worker reads its runs alone, beside the other workers
    runner = segment_task.apply_runner(
        units.rewrites, units.marks, open_fs, SEGMENT_SCHEMA, handle.path(dead_folder), readers=max(threads, 1)
    )
    here = decision.write_offsets()  # a collected decision: the kept offsets are here already
    if threads:
        table = units_of(here, units) if here is not None else _kept_in_spark(decision, units).toArrow()
        return _run_here(runner, thread_shares(table, units.rows, threads))
    ship_by_value()  # (only for Spark's workers: a write here imports no pyspark)
    kept = spark.createDataFrame(units_of(here, units)) if here is not None else _kept_in_spark(decision, units)
    # about two tasks a core, so that uneven units still spread over the cores, but no more than the rows
    # to read call for: each task starts a worker's work and writes its own vector part
    tasks = max(
        1,
        min(
            len(units.rewrites) + len(units.marks),
            parallelism(spark) * 2,
            -(-sum(units.rows.values()) // tuning.rows_per_apply_task),
        ),
    )
    return kept.repartition(tasks, "unit").mapInArrow(runner, segment_task.RESULT_SCHEMA).collect()


def thread_shares(table: pa.Table, unit_rows: dict[int, int], threads: int) -> list[pa.Table]:
    """`table` (unit, offset) cut into the shares of at most `threads` threads, its units spread by the rows
    they read; each share is one task's (so one part of the deletion vector each). The placement chose
    the threads; the write cuts the shares (and the probe spreads its Spark tasks by `spread` too)."""
    groups = spread(list(unit_rows), list(unit_rows.values()), max(1, min(threads, len(unit_rows))))
    if len(groups) == 1:
        return [table]
    units = to_numpy(table.column("unit"))
    # as in Spark, a task sees only the units that have kept offsets (a share without any is empty)
    parts = [
        part
        for part in (table.filter(from_numpy(np.isin(units, np.array(g, dtype=units.dtype)))) for g in groups)
        if len(part)
    ]
    return parts or [table]


def spread(items: list, weights: list[int], n: int) -> list[list]:
    """`items` in `n` groups of about equal weight: the heaviest first, each onto the lightest group."""
    groups: list[list] = [[] for _ in range(n)]
    loads = [0] * n
    for item, weight in sorted(zip(items, weights), key=lambda pair: -pair[1]):
        at = loads.index(min(loads))
        groups[at].append(item)
        loads[at] += max(weight, 1)
    return groups


def _run_here(runner: Callable, shares: list[pa.Table]) -> list[dict]:
    """`runner` (the write job's task function) in this process, a thread a share (`thread_shares`)."""

    def run(share: pa.Table) -> list[dict]:
        return [r for batch in runner(iter(share.to_batches())) for r in batch.to_pylist()]

    if len(shares) == 1:
        return run(shares[0])
    with ThreadPoolExecutor(max_workers=len(shares), thread_name_prefix="write") as pool:
        return [r for rows in pool.map(run, shares) for r in rows]


def _kept_in_spark(decision: Decision, units: WriteUnits):
    """Spark: (unit, offset) of the kept winners of a cached decision in the units' segments."""
    from pyspark.sql import functions as F

    assert isinstance(decision, CachedDecision), "only a cached decision keeps its offsets in Spark"
    # one SQL expression: a literal column per member is a call into the JVM each
    return decision.winners.where(F.col("keep") & F.expr(f"seg_idx IN ({', '.join(map(str, units.members))})")).select(
        offset_bucket(units.starts).alias("unit"), "offset"
    )


def units_of(kept: pa.Table, units: WriteUnits) -> pa.Table:
    """The collected offsets (offset, seg_idx) of the units' segments with their unit: the label of the
    last (unit, first offset) pair at or below each offset (as `offset_bucket`)."""
    seg_idx = kept.column("seg_idx")
    rows = kept.filter(pc.is_in(seg_idx, value_set=from_numpy(np.asarray(units.members, np.int32)).cast(seg_idx.type)))
    unit = bucket_labels(units.starts, to_numpy(rows.column("offset")))
    return pa.table({"unit": from_numpy(np.asarray(unit, np.int32)), "offset": rows.column("offset")})


def _results(handle: LogHandle, results: list) -> tuple[dict[int, tuple[FileRef, int]], int]:
    """The job's result rows as the runs' new files (relative to the log) and the new vector entries' count."""
    written: dict[int, tuple[FileRef, int]] = {}
    count = 0
    prefix = handle.path("")
    for r in results:
        rel = r["path"][len(prefix) :].lstrip("/") if r["path"].startswith(prefix) else r["path"]
        if r["kind"] == segment_task.REWRITTEN:
            written[int(r["unit"])] = (FileRef(rel, int(r["records"])), int(r["bytes"]))
        else:
            count += int(r["records"])
    return written, count


def new_vector(
    handle: LogHandle, manifest: Manifest, range_segs: list[Segment], vector: VectorPlan, count: int
) -> dict[str, Any] | None:
    """The deletion vector's manifest entry after the job wrote `count` new entries into `vector.folder`."""
    if vector.add:  # the old files stay as they are; this cleaning's entries (if any) are one more
        assert manifest.deleted is not None, "a vector is added to only when the log has one"
        return {
            "files": vector.old_files + ([vector.folder] if count else []),
            "count": manifest.deleted["count"] + count,
        }
    # rebuilt: entries of the old vector above the range stay, as do those of the range's segments
    # carried as they are (the others' were written by the job); a small table read and written on the
    # driver, not another Spark job
    if vector.old is not None:
        kept_entries = [e for i in sorted(vector.carried) if (e := vector.entries_of(range_segs[i])) is not None]
        above = np.concatenate([*kept_entries, vector.old[np.searchsorted(vector.old, range_segs[-1].next_offset) :]])
        if len(above):
            write_vector_part(handle, vector.folder, above)
            count += len(above)
    return {"files": [vector.folder], "count": count} if count else None
