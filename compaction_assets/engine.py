"""One evaluation of a log at `now`, as every shell (CLI, conformance runner, Dagster) runs it.

An evaluation that may clean (SPEC §1, §3, §5, §6):
  1. seals the active segment if its deadline passed, resets a checkpoint outside [log_start, LEO] and
     forgets remembered deletes that expired (one commit);
  2. cleans if the log is eligible (or forced), under the log's cleaning lock;
  3. applies retention when the policy has `delete`.
A failed cleaning changes nothing and marks the log uncleanable until a later success or an operator.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field

import pyarrow.compute as pc
import pyarrow.parquet as pq

from . import integrity
from .cleaner import CleanOutput, clean, merge_layout, rewrite_plan
from .config import TopicConfig
from .errors import CompactionError, ConflictError
from .manifest import Manifest
from .planner import Evaluation, evaluate, rewritten_segments, seal_active
from .store import LogHandle, wall_ms


@dataclass
class StepReport:
    evaluation: Evaluation
    cleaned: bool = False
    reason: str | None = None
    checkpoint: int = 0
    stats: dict | None = None
    retention: dict | None = None
    error: str | None = None
    log: str = ""
    before_version: int = 0        # the manifest the cleaning read (after the evaluation's own changes)
    after_version: int = 0         # the manifest it committed
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["evaluation"] = self.evaluation.as_dict()
        return d


def _expire_remembered(handle: LogHandle, m: Manifest, now: int) -> Manifest:
    rem = m.remembered
    if not rem or rem["min_expiry"] > now:
        return m
    st = handle.st
    fs = None if st.local else st.fs
    table = pq.read_table(handle.path(rem["file"]), filesystem=fs)
    table = table.filter(pc.greater(table.column("m_expiry"), now))
    if len(table) == 0:
        return m.with_(remembered=None)
    name = f"side/remembered-{handle.new_data_name('').split('/')[-1]}"
    st.makedirs(handle.path(name))
    pq.write_table(table, handle.path(f"{name}/part-0.parquet"), filesystem=fs)
    return m.with_(remembered={"file": name, "count": len(table),
                               "min_expiry": int(pc.min(table.column("m_expiry")).as_py())})


def prepare(handle: LogHandle, config: TopicConfig, now: int) -> tuple[Manifest, Evaluation]:
    """Step 1: the evaluation's own changes (deadline roll, checkpoint reset, expired remembered deletes)."""
    def change(m: Manifest) -> Manifest | None:
        ev = evaluate(m, config, now)
        new = seal_active(m) if ev.deadline_roll else m
        if new.checkpoint != ev.first_dirty_offset:
            new = new.with_(checkpoint=ev.first_dirty_offset)
        new = _expire_remembered(handle, new, now)
        return None if new is m else new
    m = handle.update(change)
    return m, evaluate(m, config, now)


def commit_cleaning(handle: LogHandle, snapshot: Manifest, out: CleanOutput, u: int, reason: str | None,
                    ev: Evaluation) -> Manifest:
    k = len(out.replaced)

    def change(m: Manifest) -> Manifest:
        if tuple(s.id for s in m.segments[:k]) != out.replaced:
            raise ConflictError(f"log {handle.name!r} changed under the cleaning (retention or a log-start "
                                "move); nothing was changed, run the cleaning again")
        concurrent = tuple(h for h in m.holds if h.until >= snapshot.log_end_offset and h not in out.holds)
        summary = {**out.stats, "reason": reason, "now": ev.now, "first_dirty_offset": ev.first_dirty_offset,
                   "first_uncleanable_offset": u, "dirty_ratio": ev.dirty_ratio,
                   "files_rewritten": out.files_rewritten, "finished_ms": wall_ms()}
        changes = dict(segments=out.segments + m.segments[k:], checkpoint=u, uncleanable=None,
                       last_cleaning=summary, deleted=out.deleted)
        if ev.compact:
            changes.update(holds=out.holds + concurrent, remembered=out.remembered,
                           tombstone_index=out.tombstone_index)
        return m.with_(**changes)
    return handle.update(change)


def retention_cut(segments: list, config: TopicConfig, now: int) -> int:
    """How many of the oldest segments retention deletes (SPEC §6); never the active (last) one."""
    total = sum(s.size for s in segments)
    cut = 0
    for s in segments[:-1]:
        by_time = config.retention_ms >= 0 and (s.records == 0 or s.max_ts < now - config.retention_ms)
        by_size = config.retention_bytes >= 0 and total - s.size >= config.retention_bytes
        if not (by_time or by_size):
            break
        total -= s.size
        cut += 1
    return cut


def apply_retention(handle: LogHandle, config: TopicConfig, now: int) -> dict | None:
    """SPEC §6 retention, oldest segment first, never the active one; metadata only (files are GC'd)."""
    if not config.delete:
        return None
    removed: dict = {}

    def change(m: Manifest) -> Manifest | None:
        cut = retention_cut(list(m.segments), config, now)
        if not cut:
            return None
        gone, segs = m.segments[:cut], m.segments[cut:]
        start = max(m.log_start_offset, segs[0].base_offset)
        removed.update(segments=len(gone), records=sum(s.records for s in gone),
                       bytes=sum(s.size for s in gone), log_start_offset=start)
        return m.with_(segments=tuple(segs), log_start_offset=start,
                       holds=tuple(h for h in m.holds if h.offset >= start))
    handle.update(change)
    return removed or None


def run(handle: LogHandle, config: TopicConfig, now: int | None = None, *, spark=None, force: bool = False,
        progress=None, gc: bool = True) -> StepReport:
    """Evaluate, maybe clean, apply retention. Raises CompactionError on refusal or failure.

    `spark` may be a function returning the session: it is then started only once the cleaning lock is
    held and a cleaning is due (so a refused or idle run never starts a JVM)."""
    now = wall_ms() if now is None else now
    with handle.lock("clean", purpose=f"cleaning at {now}"):
        if gc:
            handle.collect_garbage()
        m, ev = prepare(handle, config, now)
        reason = ev.reason_for(force)
        report = StepReport(evaluation=ev, reason=reason, checkpoint=m.checkpoint, log=handle.name,
                            before_version=m.version, after_version=m.version)
        if reason is not None:
            u = ev.first_uncleanable_offset
            try:
                integrity.check_files(handle, m)   # names a missing or corrupt file before Spark reads it
                out = clean(_session(spark), handle, m, config, u, now, progress)
            except ConflictError:
                raise
            except Exception as exc:
                if not isinstance(exc, CompactionError):  # a corrupt page? name the file (the range first)
                    exc = (integrity.find_unreadable(handle, m, rewritten_segments(m, u))
                           or (config.strategy != "offset" and integrity.find_unreadable(handle, m)) or exc)
                mark_uncleanable(handle, exc)
                raise CompactionError(f"cleaning of log {handle.name!r} failed, the log is unchanged and "
                                      f"marked uncleanable: {_one_line(exc)}") from exc
            m = commit_cleaning(handle, m, out, u, reason, ev)
            report.after_version = m.version
            report.cleaned = True
            report.stats = {k: out.stats[k] for k in out.stats}
            report.checkpoint = m.checkpoint
        report.retention = apply_retention(handle, config, now)
        report.checkpoint = handle.manifest().checkpoint
        return report


def _session(spark):
    """`spark` may be a session, a function returning one (started only when a cleaning needs it), or
    None for the process's default session."""
    if spark is None:
        from .spark import get_spark
        return get_spark()
    return spark() if callable(spark) else spark


def _one_line(exc: BaseException) -> str:
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    # Errors raised in Python workers: the useful part is the worker's own last error line.
    cause = next((line for line in reversed(text) if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)), None)
    if cause and cause != first:
        first = f"{first} {cause}"
    return f"{type(exc).__name__}: {first}"[:500]


def mark_uncleanable(handle: LogHandle, exc: BaseException) -> None:
    err = _one_line(exc)
    try:
        handle.update(lambda m: m.with_(uncleanable={"error": err, "since_ms": wall_ms()}))
    except Exception:  # the log may be unreadable; the error is raised to the caller anyway
        pass


def clear_uncleanable(handle: LogHandle) -> Manifest:
    return handle.update(lambda m: m.with_(uncleanable=None) if m.uncleanable else None)


def dry_run(handle: LogHandle, config: TopicConfig, now: int | None = None, *, spark=None,
            force: bool = False) -> dict:
    """What a cleaning at `now` would do, changing nothing: the evaluation plus records and bytes that
    would go and why (superseded, tombstone expired, retention)."""
    now = wall_ms() if now is None else now
    m = handle.manifest()
    ev = evaluate(m, config, now)
    virtual = seal_active(m) if ev.deadline_roll else m
    virtual = virtual.with_(checkpoint=ev.first_dirty_offset)
    reason = ev.reason_for(force)
    result = {"evaluation": ev.as_dict(), "reason": reason, "would_clean": reason is not None,
              "superseded": {"records": 0, "bytes": 0}, "tombstones_expired": {"records": 0, "bytes": 0},
              "tombstones_to_stamp": 0, "retention": {"segments": 0, "records": 0, "bytes": 0},
              "segments_to_rewrite": 0, "segments_to_mark": 0}
    segments = list(virtual.segments)
    if reason is not None and rewritten_segments(virtual, ev.first_uncleanable_offset):
        integrity.check_files(handle, virtual)
        spark = _session(spark)
        from pyspark.sql import functions as F

        from .cleaner import decide
        from .manifest import Segment, new_id
        d = decide(spark, handle, virtual, config, ev.first_uncleanable_offset, now)
        try:
            # only winners are in the decision: superseded = read - kept - expired tombstones
            row = d.decided.agg(
                F.sum(F.col("removed_tomb").cast("long")).alias("tr"),
                F.sum(F.when(F.col("removed_tomb"), F.col("size"))).alias("tb")).collect()[0]
            kept_bytes = sum(int(p["kept_bytes"] or 0) for p in d.per_segment.values())
        finally:
            d.decided.unpersist()
        s = d.stats
        result["superseded"] = {"records": s["records_read"] - s["records_written"] - s["tombstones_removed"],
                                "bytes": s["bytes_read"] - kept_bytes - int(row["tb"] or 0)}
        result["tombstones_expired"] = {"records": int(row["tr"] or 0), "bytes": int(row["tb"] or 0)}
        result["tombstones_to_stamp"] = d.stats["tombstones_stamped"]
        rewrite, mark = rewrite_plan(d)
        result["segments_to_rewrite"] = len(rewrite)
        result["segments_to_mark"] = len(mark)
        k = len(rewritten_segments(virtual, ev.first_uncleanable_offset))
        after = []
        for i, seg in enumerate(segments[:k]):
            p = d.per_segment.get(i) or {"kept": 0, "kept_bytes": 0, "max_ts": None}
            after.append(Segment(new_id(), seg.base_offset, seg.next_offset, records=int(p["kept"]),
                                 size=int(p["kept_bytes"] or 0), max_ts=p["max_ts"]))
        segments = merge_layout(after, config.segment_bytes) + segments[k:]
    if config.delete:
        gone = segments[:retention_cut(segments, config, now)]
        result["retention"] = {"segments": len(gone), "records": sum(s.records for s in gone),
                               "bytes": sum(s.size for s in gone)}
    return result
