"""The offset strategy's incremental decision: the newer rows grouped, the deduplicated prefix probed.

When a prefix that the last cleaning left with one record per key lies below a few newer segments, the
newer rows are grouped by Spark (their winners collected with their keys) and the prefix is probed
segment by segment for the records those keys supersede (probe_task.py), without a shuffle of its rows
(`probe_max_newer_rows`). Pinned to
the grouped decision by test_grouping_only_the_touched_keys_cleans_like_grouping_all.

`decide_by_probe` is that route to a `Decision` (the placement chooses it): the newer rows' winners, found by
Spark or in this process, decided with Arrow as a collected decision (decide/arrow_decision.py), and the prefix's
probed segments adding the offsets they lose.
"""

from __future__ import annotations

import functools
import json
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from compaction_assets.cleaning.decide import probe_task
from compaction_assets.cleaning.decide.arrow_decision import arrow_figures, kept_offsets, offset_decision
from compaction_assets.cleaning.decide.decision import (
    OFFSETS_SCHEMA,
    ProbedDecision,
    SegmentFigures,
    segment_figures,
    segment_starts,
    totals,
)
from compaction_assets.cleaning.decide.spark_tasks import parallelism
from compaction_assets.cleaning.tuning import CleanerTuning
from compaction_assets.cleaning.write import spread
from compaction_assets.errors import CorruptLogError
from compaction_assets.log.side_tables import vector_entries
from compaction_assets.log.spark_reads import ship_by_value
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments import offset_map, segment_task
from compaction_assets.segments.arrays import from_numpy, scalar, to_numpy
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Horizon, Manifest, Segment


def decide_by_probe(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    span: CleaningRange,
    grouped: Callable[[], pa.Table],
    now: int,
    new_horizon: int,
    vector,
    tuning: CleanerTuning,
    threads: int,
    key_reader: Callable[[], pa.ChunkedArray] | None = None,
) -> ProbedDecision:
    """The decision of `span` (a planner.CleaningRange): its newer segments grouped (`grouped()`, their
    winners with key, offset and decide/grouped.py's WINNER_FIELDS as an Arrow table: from Spark, or found
    here), its prefix probed in `threads` threads here (0: in Spark's Python workers) against the newer
    records' keys (`key_reader()`, when given: read apart; else the winners'). `vector` is the log's
    deletion vector (`dead_offsets`)."""
    table, probed = _probe_while_grouping(
        spark, handle, manifest, span, grouped, now, new_horizon, vector, tuning, threads, key_reader
    )
    table = offset_decision(table.drop_columns(["key"]), segment_starts(span.newer), now, new_horizon)
    figures, horizons = segment_figures(arrow_figures(table), span.newer)
    removed = _add_probed(handle, span.unique, probed, figures, horizons)
    return ProbedDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=True,
        kept=kept_offsets(table).cast(OFFSETS_SCHEMA),
        removed=removed,
        probed=frozenset(i for i, _ in span.unique),
    )


def _probe_while_grouping(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    span: CleaningRange,
    grouped: Callable[[], pa.Table],
    now: int,
    new_horizon: int,
    vector,
    tuning: CleanerTuning,
    threads: int,
    key_reader: Callable[[], pa.ChunkedArray] | None,
) -> tuple[pa.Table, dict[int, tuple[np.ndarray, dict]]]:
    """The newer rows' winners (`grouped()`) and the prefix's probe (`probe`), at once."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="newer") as pool:
        # the newer rows' winners are found while the probe runs: its threads test their rows as soon as
        # the newer keys are read, not once the winners are (a core would sit idle meanwhile, the probe's
        # threads waiting for the keys after their read-ahead); the newer files' keys and offsets are then
        # read twice, which costs less than that idle core
        newer = pool.submit(grouped)
        read_keys = pool.submit(key_reader) if key_reader is not None else None

        def tested_keys() -> pa.Array | pa.ChunkedArray:  # asked once (the probe's threads share the set)
            if read_keys is not None:
                return read_keys.result()
            return newer.result().column("key").combine_chunks().cast(pa.binary())  # a row a key: its winner

        ready = read_keys.done if read_keys is not None else newer.done
        newer_keys = NewerKeys(tested_keys, ready)
        probed = probe(spark, handle, manifest, span.unique, newer_keys, now, new_horizon, vector, tuning, threads)
        return newer.result(), probed


def _add_probed(
    handle: LogHandle,
    unique: list[tuple[int, Segment]],
    probed: dict[int, tuple[np.ndarray, dict]],
    figures: dict[int, SegmentFigures],
    horizons: dict[int, list[Horizon]],
) -> pa.Table:
    """The probed segments' figures and horizons added to `figures` and `horizons`; the offsets they
    lose (OFFSETS_SCHEMA)."""
    removed = []
    for i, seg in unique:
        if not seg.records:
            continue
        found, seg_figures = probed[i]
        figures[i], seg_horizons = probed_figures(handle, seg, found, seg_figures)
        if seg_horizons:
            horizons[i] = seg_horizons
        removed.append(
            pa.table(
                {
                    "offset": from_numpy(found.astype(np.int64, copy=False)),
                    "seg_idx": from_numpy(np.full(len(found), i, np.int32)),
                }
            )
        )
    return pa.concat_tables(removed) if removed else OFFSETS_SCHEMA.empty_table()


def probed_figures(
    handle: LogHandle, seg: Segment, found: np.ndarray, figures: dict
) -> tuple[SegmentFigures, list[Horizon]]:
    """A probed segment's figures (from probe_task's JSON), checked against its metadata."""
    if figures["kept"] + figures["removed"] != seg.records:
        raise CorruptLogError(
            f"log {handle.name!r}: segment [{seg.base_offset}, {seg.next_offset}) holds "
            f"{figures['kept'] + figures['removed']} visible records, its metadata says {seg.records}: "
            "its files and the manifest disagree"
        )
    kept = {k: v for k, v in figures.items() if k not in ("horizons", "removed")}
    return (
        SegmentFigures(seg.physical_rows, seg.records, seg.size, **kept, unchanged=not len(found)),
        [Horizon(*h) for h in figures["horizons"]],
    )


@dataclass(frozen=True)
class NewerKeys:
    """The newer records' keys, being found elsewhere: `get()` gives them (an Arrow binary array or
    chunked array, a key once or as often as it has records), waiting if need be; `ready()` says whether
    it would not wait."""

    get: Callable[[], pa.Array | pa.ChunkedArray]
    ready: Callable[[], bool]


def probe(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    unique: list[tuple[int, Segment]],
    newer: NewerKeys,
    now: int,
    new_horizon: int,
    vector,
    tuning: CleanerTuning,
    threads: int,
) -> dict[int, tuple[np.ndarray, dict]]:
    """probe_task over the segments `unique`, in `threads` threads of this process or (0) in one Spark job
    of Python workers (as the cleaning's placement chose); per segment index, (removed offsets ascending,
    figures). Threads read ahead until the newer records' keys are ready; `vector` is the log's deletion
    vector (`dead_offsets`)."""
    old = to_numpy(vector) if vector is not None else None
    specs = [
        probe_task.ProbeSpec(
            i,
            tuple((handle.path(f.name), f.stamp) for f in seg.files),
            manifest.log_start_offset,
            vector_entries(old, seg),
            seg.physical_rows,
        )
        for i, seg in unique
        if seg.records
    ]
    open_fs = functools.partial(segment_task.open_filesystem, handle.st.filesystem_spec())
    if threads:
        return _probed_here(specs, newer, now, new_horizon, open_fs, threads, tuning)
    # as many tasks as Spark runs at once (twice), each one's segments in offset order
    n_tasks = max(1, min(len(specs), parallelism(spark) * 2))
    tasks = [
        sorted(group, key=lambda spec: spec.seg_idx) for group in spread(specs, [spec.rows for spec in specs], n_tasks)
    ]
    runner = probe_task.probe_runner(tasks, newer.get(), now, new_horizon, open_fs, tuning.probe_batch_rows)
    ship_by_value(offset_map, probe_task)  # (only for Spark's workers: a probe here imports no pyspark)
    result = spark.range(0, n_tasks, 1, n_tasks).mapInArrow(runner, probe_task.RESULT_SCHEMA).toArrow()
    return _removed_by_segment(result)


def _probed_here(
    specs: list[probe_task.ProbeSpec],
    newer: NewerKeys,
    now: int,
    new_horizon: int,
    open_fs: Callable,
    threads: int,
    tuning: CleanerTuning,
) -> dict[int, tuple[np.ndarray, dict]]:
    """probe_task in `threads` threads of this process: each takes the next segment (the largest first)
    when it gets free, and all share one key set."""
    waiting: queue.SimpleQueue = queue.SimpleQueue()
    for spec in sorted(specs, key=lambda spec: -spec.rows):
        waiting.put(spec)

    def taken() -> Iterator[probe_task.ProbeSpec]:
        while True:
            try:
                yield waiting.get_nowait()
            except queue.Empty:
                return

    shared = SharedKeySet(newer)

    def run(_: int) -> list:
        return probe_task.probe_segments(
            taken(), shared, now, new_horizon, open_fs(), tuning.probe_batch_rows, tuning.probe_read_ahead_rows
        )

    workers = max(1, min(threads, len(specs)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="probe") as pool:
        parts = list(pool.map(run, range(workers)))
    return {seg_idx: (removed, figures) for part in parts for seg_idx, removed, figures in part}


class SharedKeySet:
    """The key set of the newer records' keys, for the probe's threads: built once, by the first thread
    that finds the keys ready (the others read ahead meanwhile, then use it)."""

    def __init__(self, newer: NewerKeys):
        self.newer, self.lock = newer, threading.Lock()
        self.built: list[offset_map.KeySet] = []

    def ready(self) -> bool:
        """Whether `get` would not wait: the set is built, or the keys are ready and no thread builds it."""
        return bool(self.built) or (self.newer.ready() and not self.lock.locked())

    def get(self) -> offset_map.KeySet:
        """The set (built by this call if no thread has built it)."""
        with self.lock:
            if not self.built:
                self.built.append(offset_map.KeySet(self.newer.get()))
            return self.built[0]


def _removed_by_segment(result: pa.Table) -> dict[int, tuple[np.ndarray, dict]]:
    """The probe's rows (a removed offset, or a segment's figures) as, per segment, (removed offsets
    ascending, figures)."""
    seg_idx = to_numpy(result.column("seg_idx"))
    offsets = result.column("offset")
    found = to_numpy(offsets.is_valid())
    # the removed offsets by segment, ascending in each: one sort, then a slice a segment
    owner, removed = seg_idx[found], to_numpy(offsets.fill_null(scalar(0)))[found]
    order = np.lexsort((removed, owner))
    owner, removed = owner[order], removed[order]
    out: dict[int, tuple[np.ndarray, dict]] = {}
    for i, text in zip(seg_idx[~found].tolist(), result.column("figures").filter(offsets.is_null()).to_pylist()):
        lo, hi = np.searchsorted(owner, [i, i + 1])
        out[int(i)] = (removed[lo:hi], json.loads(text))
    return out
