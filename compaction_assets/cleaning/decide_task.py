"""The offset strategy's decision with Arrow, from its winners: here (a collected decision) or in the
group-by's own tasks (a large range).

Under the offset strategy a winner's fate depends on its own row, `now` and its segment only (no guard,
nothing remembered), so the decision's columns, the figures per segment and the kept offsets are worked
out from the winners with Arrow: `offset_decision`, `arrow_figures` and `kept_offsets`, as Spark's
projection (decide.py's `decision_columns`) and `spark_figures` (decision.py) work them out for a cached
decision.

A range too large to collect its winners (about 40 bytes each) runs the same functions in the tasks of the
group-by that found them (`decision_runner`, Spark's Python workers): only the figures and the kept
offsets (8 bytes each) come back, in the one job that groups, instead of a cache of every winner and a
second job for the offsets (50M distinct keys on one server: the decision 267 s cached, 150-154 s in its
tasks).
This module imports only pyarrow, numpy and log/segment_task.py: it is shipped to executors by value.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.log.segment_task import bucket_labels

# a task's rows: a segment's kept offsets (int64, native order) packed in one value, or (seg_idx null)
# the task's figures by segment and kept-tombstone horizon, as JSON rows of `arrow_figures`
RESULT_SCHEMA = "seg_idx int, offsets binary, figures string"


def offset_decision(winners: pa.Table, starts: list[tuple[int, int]], now: int, new_horizon: int) -> pa.Table:
    """The offset strategy's decision columns of winners (offset, timestamp, tomb, delete_horizon, size)
    in the segments that `starts` gives as (index, base offset): as `decide`'s Spark projection
    (`decision_columns`) computes them when nothing is remembered or held (that strategy has no
    resurrection guard)."""
    tomb, horizon = winners.column("tomb"), winners.column("delete_horizon")
    expired = pc.and_(tomb, pc.fill_null(pc.greater_equal(pa.scalar(now, pa.int64()), horizon), False))
    keep = pc.invert(expired)
    kept_tomb = pc.and_(keep, tomb)
    seg_idx = bucket_labels(starts, winners.column("offset").to_numpy())
    return winners.append_column("seg_idx", pa.array(seg_idx, pa.int32())).append_column(
        "removed_tomb", expired).append_column("keep", keep).append_column(
        "stamped", pc.and_(kept_tomb, pc.is_null(horizon))).append_column(
        "new_horizon", pc.if_else(kept_tomb, pc.coalesce(horizon, pa.scalar(new_horizon, pa.int64())),
                                  pa.scalar(None, pa.int64())))


def kept_offsets(table: pa.Table) -> pa.Table:
    """The (offset, seg_idx) of the kept winners of a decision table."""
    return table.filter(table.column("keep")).select(["offset", "seg_idx"])


def arrow_figures(table: pa.Table) -> list[dict]:
    """The figures of a decision table by segment and kept-tombstone horizon, as `spark_figures`
    (decision.py) computes them for a cached decision, with Arrow."""
    keep, tomb, ts, off, size = (table.column(c) for c in ("keep", "tomb", "timestamp", "offset", "size"))
    kept_tomb = pc.and_(keep, tomb)
    removed = table.column("removed_tomb")

    def where(cond, values):
        return pc.if_else(cond, values, pa.scalar(None, values.type))
    t = pa.table({
        "seg_idx": table.column("seg_idx"), "hkey": where(kept_tomb, table.column("new_horizon")),
        "kept": pc.cast(keep, pa.int64()), "kept_bytes": where(keep, size), "ts": where(keep, ts),
        "pos_ts": where(pc.and_(keep, pc.greater(ts, 0)), ts), "kept_offset": where(keep, off),
        "tombstones": pc.cast(kept_tomb, pa.int64()), "stamped": pc.cast(table.column("stamped"), pa.int64()),
        "removed_tomb": pc.cast(removed, pa.int64()), "removed_bytes": where(removed, size),
        "tomb_offset": where(kept_tomb, off)})
    out = t.group_by(["seg_idx", "hkey"]).aggregate([
        ("kept", "sum"), ("kept_bytes", "sum"), ("ts", "min"), ("ts", "max"), ("kept_offset", "min"),
        ("pos_ts", "min"), ("tombstones", "sum"), ("stamped", "sum"), ("removed_tomb", "sum"),
        ("removed_bytes", "sum"), ("tomb_offset", "min"), ("tomb_offset", "max")])
    names = {"kept_sum": "kept", "kept_bytes_sum": "kept_bytes", "ts_min": "min_ts", "ts_max": "max_ts",
             "kept_offset_min": "first_offset", "pos_ts_min": "min_pos_ts", "tombstones_sum": "tombstones",
             "stamped_sum": "stamped", "removed_tomb_sum": "removed_tomb", "removed_bytes_sum": "removed_bytes",
             "tomb_offset_min": "tomb_lo", "tomb_offset_max": "tomb_hi"}
    out = out.rename_columns([names.get(c, c) for c in out.column_names])
    # a group's first kept timestamp: the row of its lowest kept offset (offsets are unique), found by
    # a hash lookup of those few offsets rather than by sorting every row
    at = pc.index_in(out.column("first_offset"), value_set=off)
    return out.append_column("first_ts", pc.take(ts, at)).to_pylist()


def decision_runner(starts: list[tuple[int, int]], now: int, new_horizon: int):
    """The function for `mapInArrow` over the winners of a group-by's task (offset and the winner's
    fields): the task's RESULT_SCHEMA rows, a row of kept offsets per segment and one of figures."""
    def run(batches):
        batches = [batch for batch in batches if batch.num_rows]
        if not batches:      # a partition without winners (the group-by's hashing can leave some empty)
            return
        winners = pa.Table.from_batches(batches)
        table = offset_decision(winners, starts, now, new_horizon)
        kept = kept_offsets(table)
        seg_idx, offsets = kept.column("seg_idx").to_numpy(), kept.column("offset").to_numpy()
        order = np.argsort(seg_idx, kind="stable")
        seg_idx, offsets = seg_idx[order], offsets[order]
        segments, packed = [], []
        if len(seg_idx):
            cuts = np.flatnonzero(np.diff(seg_idx)) + 1      # where the next segment's offsets start
            segments = seg_idx[np.r_[0, cuts]].tolist()
            packed = [part.tobytes() for part in np.split(offsets, cuts)]
        yield pa.RecordBatch.from_arrays([
            pa.array(segments + [None], pa.int32()), pa.array(packed + [None], pa.binary()),
            pa.array([None] * len(segments) + [json.dumps(arrow_figures(table))], pa.string())],
            names=["seg_idx", "offsets", "figures"])
    return run


def task_results(result: pa.Table) -> tuple[list[dict], pa.Table]:
    """The rows of `decision_runner`'s job as (figure rows of every task, kept offsets (offset, seg_idx))."""
    rows = [row for text in result.column("figures").drop_null().to_pylist() for row in json.loads(text)]
    packed = result.filter(pc.is_valid(result.column("seg_idx")))
    parts, lengths = [], []
    for chunk in packed.column("offsets").chunks:
        # a chunk's values lie back to back in one buffer: its offsets read without a copy a value
        bounds = np.frombuffer(chunk.buffers()[1], np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
        data = np.frombuffer(chunk.buffers()[2], np.uint8)
        parts.append(data[bounds[0]:bounds[-1]].view(np.int64))
        lengths.append(np.diff(bounds) // 8)
    offsets = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    seg_idx = np.repeat(packed.column("seg_idx").to_numpy(), np.concatenate(lengths) if lengths else [])
    return rows, pa.table({"offset": pa.array(offsets, pa.int64()), "seg_idx": pa.array(seg_idx.astype(np.int32))})
