"""The offset strategy's decision with Arrow, from each key's winner: made whole in this process, or in the
tasks of Spark's group-by.

Under the offset strategy a winner's fate depends on its own row, `now` and its segment only (no guard,
nothing remembered), so the decision's columns, the figures per segment and the kept offsets are worked out
from the winners with Arrow: `offset_decision`, `arrow_figures` and `kept_offsets`, as Spark's projection
(grouped.py's `decision_columns`) and `spark_figures` (decision.py) work them out for a cached decision.
They run:
- here, for a local master's range that fits (`decide_here`): Spark's tasks would run on this machine's
  cores, so a group-by there buys no parallelism this process lacks, and pays for a shuffle of every narrow
  row and a hash aggregation in the JVM's heap. The range's narrow columns (about 50 bytes a row) are read a
  thread a core and split into buckets of keys by the offset map's hash (segments/offset_map.py's
  `split_by_key`); each bucket's winners are its keys' highest offsets (a newer record always wins),
  numbered by that hash, a bucket a thread. The probe's newer rows find their winners the same way
  (`newer_winners`, `newer_keys`);
- on the driver, for winners that Spark's group-by collected (grouped.py, probe.py);
- in the group-by's own tasks, for a range too large to collect its winners (about 40 bytes each):
  `decision_runner` in Spark's Python workers, so that only the figures and the kept offsets (8 bytes
  each) come back, in the one job that groups, instead of a cache of every winner and a second job for
  the offsets. What the tasks run uses only pyarrow, numpy and segments/arrays.py: this module is shipped
  to executors by value, and cloudpickle ships a function with the globals it names, not the reads above.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.decide.decision import OFFSETS_SCHEMA, LocalDecision, segment_figures, totals
from compaction_assets.log.reader import read_file
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.arrays import bucket_labels, from_numpy, from_strings, scalar, to_numpy
from compaction_assets.segments.offset_map import KEY_HASH, highest_offsets, split_by_key
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment

# what a row of the range is read as: the key and offset that find the winners, and the winners' fields
NARROW_COLUMNS = ("offset", "key", "timestamp", "is_tombstone", "delete_horizon", "record_size")
# ... named as the decision's columns (decide/grouped.py's WINNER_FIELDS)
WINNER_NAMES = {"is_tombstone": "tomb", "record_size": "size"}
KEYED_WINNER_SCHEMA = pa.schema(
    [(WINNER_NAMES.get(name, name), SEGMENT_SCHEMA.field(name).type) for name in NARROW_COLUMNS]
)


def decide_here(
    handle: LogHandle,
    manifest: Manifest,
    span: CleaningRange,
    now: int,
    new_horizon: int,
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
) -> LocalDecision:
    """The decision of `span` (the offset strategy's), its files read in `threads` threads here and its
    keys decided in `buckets` buckets."""
    starts = [(i, seg.base_offset) for i, seg in span.segments]
    rows, kept = [], []
    for found in bucket_winners(handle, manifest, span.segments, vector, threads, buckets):
        table = offset_decision(found, starts, now, new_horizon)
        rows += arrow_figures(table)
        kept.append(kept_offsets(table))
    figures, horizons = segment_figures(rows, span.segments)
    return LocalDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        kept=pa.concat_tables(kept) if kept else OFFSETS_SCHEMA.empty_table(),
    )


def newer_winners(
    handle: LogHandle,
    manifest: Manifest,
    segments: list[tuple[int, Segment]],
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
) -> pa.Table:
    """Each key's winner over the segments with its key (the probe's newer rows, probe.py): key, offset
    and WINNER_FIELDS, one table."""
    found = list(bucket_winners(handle, manifest, segments, vector, threads, buckets, with_key=True))
    return pa.concat_tables(found) if found else KEYED_WINNER_SCHEMA.empty_table()


def newer_keys(
    handle: LogHandle, manifest: Manifest, segments: list[tuple[int, Segment]], vector: Callable[[], pa.Array | None]
) -> pa.ChunkedArray:
    """The keys of the segments' visible records (a key as often as it has records): the keys whose
    older records a probe removes, the same as their winners' (newer_winners), had without grouping."""
    dead = vector() if any(seg.dead for _, seg in segments) else None
    tables = [
        read_file(handle, ref, manifest.log_start_offset, dead, ("offset", "key"))
        for _, seg in segments
        for ref in seg.files
    ]
    return pa.chunked_array(
        [chunk for table in tables for chunk in table.column("key").chunks], SEGMENT_SCHEMA.field("key").type
    )


def bucket_winners(
    handle: LogHandle,
    manifest: Manifest,
    segments: list[tuple[int, Segment]],
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
    with_key: bool = False,
) -> Iterator[pa.Table]:
    """Each key's winner over the segments' visible records (log start and deletion vector applied, file
    stamps on tombstones), its offset and decide/grouped.py's WINNER_FIELDS (and its key `with_key`): a
    table per bucket of keys.

    The rows are split by a hash of their key as they are read, and each bucket's keys are found apart,
    a bucket a thread: what deciding holds beyond the narrow rows is one bucket's a thread, not the whole
    range's."""
    dead = vector() if any(seg.dead for _, seg in segments) else None
    refs = [ref for _, seg in segments for ref in seg.files]

    def read(ref) -> list[pa.Table]:
        return split_by_key(read_file(handle, ref, manifest.log_start_offset, dead, NARROW_COLUMNS), buckets)

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="decide") as pool:
        parts = [pool.submit(read, ref) for ref in refs]
        by_bucket: list[list[pa.Table]] = [[] for _ in range(buckets)]
        for part in parts:
            for bucket, piece in enumerate(part.result()):
                by_bucket[bucket].append(piece)
        del parts
        # (a bucket's pieces share their file's buffers with the other buckets: the narrow rows are held
        # whole until the last bucket is decided, as placement.py counts them)
        # a bucket a thread; `map` hands the winners over in bucket order (and cancels the buckets not
        # started when the caller stops early)
        decided = pool.map(functools.partial(_bucket_winners, by_bucket, with_key=with_key), range(buckets))
        yield from (table for table in decided if table is not None)


def _bucket_winners(by_bucket: list[list[pa.Table]], bucket: int, with_key: bool) -> pa.Table | None:
    """The winners of one bucket's pieces (None: no row), its pieces let go."""
    pieces, by_bucket[bucket] = by_bucket[bucket], []
    if not pieces:
        return None
    table = pa.concat_tables(pieces)
    return _winners(table, with_key) if len(table) else None


def _winners(table: pa.Table, with_key: bool) -> pa.Table:
    """The rows of `table` (NARROW_COLUMNS and KEY_HASH) that are their key's winner, named as the
    decision reads them."""
    won = highest_offsets(table, to_numpy(table.column(KEY_HASH)))
    winners = table.drop_columns([KEY_HASH] if with_key else [KEY_HASH, "key"]).filter(won)
    return winners.rename_columns([WINNER_NAMES.get(c, c) for c in winners.column_names])


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# a task's rows: a segment's kept offsets (int64, native order) packed in one value, or (seg_idx null)
# the task's figures by segment and kept-tombstone horizon, as JSON rows of `arrow_figures`
RESULT_SCHEMA = "seg_idx int, offsets binary, figures string"


def offset_decision(winners: pa.Table, starts: list[tuple[int, int]], now: int, new_horizon: int) -> pa.Table:
    """The offset strategy's decision columns of winners (offset, timestamp, tomb, delete_horizon, size)
    in the segments that `starts` gives as (index, base offset): as `decide`'s Spark projection
    (`decision_columns`) computes them when nothing is remembered or held (that strategy has no
    resurrection guard)."""
    tomb, horizon = winners.column("tomb"), winners.column("delete_horizon")
    expired = pc.and_(tomb, pc.fill_null(pc.greater_equal(scalar(now), horizon), scalar(False, pa.bool_())))
    keep = pc.invert(expired)
    kept_tomb = pc.and_(keep, tomb)
    seg_idx = bucket_labels(starts, to_numpy(winners.column("offset")))
    return (
        winners.append_column("seg_idx", from_numpy(np.asarray(seg_idx, np.int32)))
        .append_column("removed_tomb", expired)
        .append_column("keep", keep)
        .append_column("stamped", pc.and_(kept_tomb, pc.is_null(horizon)))
        .append_column("new_horizon", pc.if_else(kept_tomb, pc.coalesce(horizon, scalar(new_horizon)), scalar(None)))
    )


def kept_offsets(table: pa.Table) -> pa.Table:
    """The (offset, seg_idx) of the kept winners of a decision table."""
    return table.filter(table.column("keep")).select(["offset", "seg_idx"])


def arrow_figures(table: pa.Table) -> list[dict]:
    """The figures of a decision table by segment and kept-tombstone horizon, as `spark_figures`
    (decision.py) computes them for a cached decision: with numpy over the rows sorted by group (Arrow's
    group-by engine imports pandas, which a cleaning otherwise never needs). A figure over no rows
    is None, as Spark's and Arrow's aggregates give it."""
    if not table.num_rows:
        return []
    keep, tomb, removed, stamped = (to_numpy(table.column(c)) for c in ("keep", "tomb", "removed_tomb", "stamped"))
    ts, offset, size = (to_numpy(table.column(c)).astype(np.int64, copy=False) for c in ("timestamp", "offset", "size"))
    kept_tomb = keep & tomb
    horizon = np.where(kept_tomb, to_numpy(pc.fill_null(table.column("new_horizon"), scalar(0))), 0)
    groups = _Groups(to_numpy(table.column("seg_idx")).astype(np.int64, copy=False), kept_tomb, horizon)
    positive = keep & (ts > 0)
    kept, kept_tombs, removed_count = groups.count(keep), groups.count(kept_tomb), groups.count(removed)
    first_offset = groups.least(keep, offset)
    return groups.rows(
        {
            "kept": kept.tolist(),
            "kept_bytes": _or_none(groups.total(keep, size), kept),
            "min_ts": _or_none(groups.least(keep, ts), kept),
            "max_ts": _or_none(groups.most(keep, ts), kept),
            "first_offset": _or_none(first_offset, kept),
            "min_pos_ts": _or_none(groups.least(positive, ts), groups.count(positive)),
            "tombstones": kept_tombs.tolist(),
            "stamped": groups.count(stamped).tolist(),
            "removed_tomb": removed_count.tolist(),
            "removed_bytes": _or_none(groups.total(removed, size), removed_count),
            "tomb_lo": _or_none(groups.least(kept_tomb, offset), kept_tombs),
            "tomb_hi": _or_none(groups.most(kept_tomb, offset), kept_tombs),
            "first_ts": _or_none(groups.at_offset(keep, offset, first_offset, ts), kept),
        }
    )


class _Groups:
    """A decision table's rows in groups of one segment and kept-tombstone horizon (`has_horizon`:
    a kept tombstone's row), sorted once: each reduction over a mask of the rows reads them in that order,
    a group's rows back to back."""

    def __init__(self, seg_idx: np.ndarray, has_horizon: np.ndarray, horizon: np.ndarray):
        self.order = np.lexsort((horizon, has_horizon, seg_idx))
        seg_idx, has_horizon, horizon = seg_idx[self.order], has_horizon[self.order], horizon[self.order]
        changes = (seg_idx[1:] != seg_idx[:-1]) | (has_horizon[1:] != has_horizon[:-1]) | (horizon[1:] != horizon[:-1])
        self.starts = np.flatnonzero(np.r_[True, changes])  # where each group's rows start, in sorted order
        # per group, its segment and its horizon (None: the rows other than kept tombstones)
        self.keys = [(int(seg_idx[at]), int(horizon[at]) if has_horizon[at] else None) for at in self.starts.tolist()]

    def count(self, mask: np.ndarray) -> np.ndarray:
        """Per group, its rows in `mask`."""
        return np.add.reduceat(mask[self.order].astype(np.int64), self.starts)

    def total(self, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Per group, the sum of `values` over its rows in `mask`."""
        return np.add.reduceat(np.where(mask, values, 0)[self.order], self.starts)

    def least(self, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Per group, the least of `values` over its rows in `mask` (INT64_MAX over none)."""
        return np.minimum.reduceat(np.where(mask, values, INT64_MAX)[self.order], self.starts)

    def most(self, mask: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Per group, the most of `values` over its rows in `mask` (INT64_MIN over none)."""
        return np.maximum.reduceat(np.where(mask, values, INT64_MIN)[self.order], self.starts)

    def at_offset(self, mask: np.ndarray, offset: np.ndarray, wanted: np.ndarray, values: np.ndarray) -> np.ndarray:
        """Per group, `values` at its row in `mask` whose offset is the group's `wanted` one (offsets are
        unique; 0 where none is): found through each row's group, with no second sort."""
        group = np.empty(len(self.order), np.int64)
        group[self.order] = np.repeat(np.arange(len(self.starts)), np.diff(np.r_[self.starts, len(self.order)]))
        rows = np.flatnonzero(mask & (offset == wanted[group]))
        found = np.zeros(len(self.starts), np.int64)
        found[group[rows]] = values[rows]
        return found

    def rows(self, columns: dict[str, list]) -> list[dict]:
        """A row a group: its seg_idx and hkey, then its value of each of `columns`."""
        return [
            {"seg_idx": seg_idx, "hkey": hkey, **{name: values[g] for name, values in columns.items()}}
            for g, (seg_idx, hkey) in enumerate(self.keys)
        ]


def _or_none(values, counts) -> list:
    """Per group, its figure as an int, or None where it was taken over no rows."""
    return [int(v) if c else None for v, c in zip(values.tolist(), counts.tolist())]


def decision_runner(starts: list[tuple[int, int]], now: int, new_horizon: int):
    """The function for `mapInArrow` over the winners of a group-by's task (offset and the winner's
    fields): the task's RESULT_SCHEMA rows, a row of kept offsets per segment and one of figures."""

    def run(batches):
        batches = [batch for batch in batches if batch.num_rows]
        if not batches:  # a partition without winners (the group-by's hashing can leave some empty)
            return
        winners = pa.Table.from_batches(batches)
        table = offset_decision(winners, starts, now, new_horizon)
        kept = kept_offsets(table)
        seg_idx, offsets = to_numpy(kept.column("seg_idx")), to_numpy(kept.column("offset"))
        order = np.argsort(seg_idx, kind="stable")
        seg_idx, offsets = seg_idx[order], offsets[order]
        segments, packed = [], []
        if len(seg_idx):
            cuts = np.flatnonzero(np.diff(seg_idx)) + 1  # where the next segment's offsets start
            segments = seg_idx[np.r_[0, cuts]].tolist()
            packed = [part.tobytes() for part in np.split(offsets, cuts)]
        yield pa.RecordBatch.from_arrays(
            [
                from_numpy(np.r_[segments, 0].astype(np.int32), mask=np.r_[np.zeros(len(segments), bool), True]),
                pa.array(packed + [None], pa.binary()),
                from_strings([None] * len(segments) + [json.dumps(arrow_figures(table))]),
            ],
            names=["seg_idx", "offsets", "figures"],
        )

    return run


def task_results(result: pa.Table) -> tuple[list[dict], pa.Table]:
    """The rows of `decision_runner`'s job as (figure rows of every task, kept offsets (offset, seg_idx))."""
    rows = [row for text in result.column("figures").drop_null().to_pylist() for row in json.loads(text)]
    packed = result.filter(pc.is_valid(result.column("seg_idx")))
    parts, lengths = [], []
    for chunk in packed.column("offsets").chunks:
        # a chunk's values lie back to back in one buffer: its offsets read without a copy a value
        bounds = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
        data = np.frombuffer(chunk.buffers()[2], np.uint8)
        parts.append(data[bounds[0] : bounds[-1]].view(np.int64))
        lengths.append(np.diff(bounds) // 8)
    offsets = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    seg_idx = np.repeat(to_numpy(packed.column("seg_idx")), np.concatenate(lengths) if lengths else [])
    return rows, pa.table(
        {"offset": from_numpy(offsets.astype(np.int64, copy=False)), "seg_idx": from_numpy(seg_idx.astype(np.int32))}
    )
