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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from compaction_assets.cleaning import faults
from compaction_assets.cleaning.cleaner import CleanOutput, Route, clean
from compaction_assets.cleaning.decide import decide
from compaction_assets.cleaning.decision import CleaningStats
from compaction_assets.cleaning.layout import chosen_plan, merge_layout
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.errors import CompactionError, ConflictError, CorruptLogError, EngineError
from compaction_assets.log.reader import check_files, find_unreadable
from compaction_assets.log.side_tables import expire_remembered
from compaction_assets.planning.planner import (
    Evaluation,
    Reason,
    cleaning_range,
    evaluate,
    rewritten_segments,
    seal_active,
)
from compaction_assets.spark.lazy_session import cleaning_session, session_of, started_session
from compaction_assets.store.log_store import LogHandle, wall_ms
from compaction_assets.store.manifest import LastCleaning, Manifest, Segment, Uncleanable, new_id
from compaction_assets.topics.config import Strategy, TopicConfig


@dataclass(frozen=True)
class Retention:
    """What retention removed (SPEC §6): the oldest segments, their records and bytes, the new log start."""

    segments: int
    records: int
    bytes: int
    log_start_offset: int


@dataclass
class StepReport:
    """One evaluation of a log (`run`): whether and why it was cleaned, the cleaning's totals, retention."""

    evaluation: Evaluation
    cleaned: bool = False
    reason: Reason | None = None
    checkpoint: int = 0
    stats: CleaningStats | None = None
    retention: Retention | None = None
    error: str | None = None
    log: str = ""
    before_version: int = 0  # the manifest the cleaning read (after the evaluation's own changes)
    after_version: int = 0  # the manifest it committed
    route: Route | None = field(default=None, compare=False)  # the cleaning's paths (not in `as_dict`)

    def summary(self) -> str:
        """One line: what this step did."""
        if not self.cleaned:
            return "not eligible, nothing cleaned"
        s = self.stats
        return f"cleaned ({self.reason}) {s.records_read} -> {s.records_written} records in {s.clean_time_secs:.1f}s"

    def as_dict(self) -> dict:
        """The report as JSON-ready data (the CLI's `clean` output)."""
        d = asdict(self)
        d.pop("route")
        d["evaluation"] = self.evaluation.as_dict()
        return d


def _commit(handle: LogHandle, change: Callable[[Manifest], Manifest | None]) -> Manifest:
    """`change` applied to the newest manifest and committed, tried again on the newer one after losing to
    another writer: the loop of `LogHandle.update`, run here so that the log store never calls back into
    the cleaning (its tries are `attempts`, each committed by `commit`)."""
    for attempt in handle.attempts():
        committed = handle.commit(attempt, change(attempt.current))
        if committed is not None:
            return committed
    raise AssertionError("attempts() raises ConflictError once its tries are spent")


def prepare(handle: LogHandle, config: TopicConfig, now: int) -> tuple[Manifest, Evaluation]:
    """Step 1: the evaluation's own changes (deadline roll, checkpoint reset, expired remembered deletes)."""

    def change(manifest: Manifest) -> Manifest | None:
        ev = evaluate(manifest, config, now)
        new = seal_active(manifest) if ev.deadline_roll else manifest
        if new.checkpoint != ev.first_dirty_offset:
            new = new.with_(checkpoint=ev.first_dirty_offset)
        if ev.remembered_expired:
            new = new.with_(remembered=expire_remembered(handle, new.remembered, now))
        return None if new is manifest else new

    m = _commit(handle, change)
    return m, evaluate(m, config, now)


def commit_cleaning(
    handle: LogHandle,
    snapshot: Manifest,
    out: CleanOutput,
    first_uncleanable: int,
    reason: Reason | None,
    evaluation: Evaluation,
) -> Manifest:
    """Commit a cleaning's output on top of the newest manifest, refusing if its range changed meanwhile."""
    k = len(out.replaced)

    def change(manifest: Manifest) -> Manifest:
        if tuple(s.id for s in manifest.segments[:k]) != out.replaced:
            raise ConflictError(
                f"log {handle.name!r} changed under the cleaning (retention or a log-start "
                "move); nothing was changed, run the cleaning again"
            )
        concurrent = tuple(h for h in manifest.holds if h.until >= snapshot.log_end_offset and h not in out.holds)
        summary = LastCleaning(
            now=evaluation.now,
            reason=reason,
            first_dirty_offset=evaluation.first_dirty_offset,
            first_uncleanable_offset=first_uncleanable,
            dirty_ratio=evaluation.dirty_ratio,
            files_rewritten=out.files_rewritten,
            finished_ms=wall_ms(),
            # the cleaning kept one record per key below u: the latest state scans that section
            unique_keys_below=first_uncleanable,
            figures=out.stats.as_dict(),
        )
        changes = dict(
            segments=out.segments + manifest.segments[k:],
            checkpoint=first_uncleanable,
            uncleanable=None,
            last_cleaning=summary,
            deleted=out.deleted,
        )
        if evaluation.compact:
            changes.update(holds=out.holds + concurrent, remembered=out.remembered, tombstone_index=out.tombstone_index)
        return manifest.with_(**changes)

    return _commit(handle, change)


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


def apply_retention(handle: LogHandle, config: TopicConfig, now: int) -> Retention | None:
    """SPEC §6 retention, oldest segment first, never the active one; metadata only (files are GC'd)."""
    if not config.delete:
        return None
    removed: list[Retention] = []  # the last attempt's (a commit that lost a race is tried again)

    def change(manifest: Manifest) -> Manifest | None:
        cut = retention_cut(list(manifest.segments), config, now)
        if not cut:
            return None
        gone, segs = manifest.segments[:cut], manifest.segments[cut:]
        start = max(manifest.log_start_offset, segs[0].base_offset)
        removed[:] = [Retention(len(gone), sum(s.records for s in gone), sum(s.size for s in gone), start)]
        return manifest.with_(
            segments=tuple(segs), log_start_offset=start, holds=tuple(h for h in manifest.holds if h.offset >= start)
        )

    _commit(handle, change)
    return removed[0] if removed else None


def run(
    handle: LogHandle,
    config: TopicConfig,
    now: int | None = None,
    *,
    spark=None,
    force: bool = False,
    progress=None,
    gc: bool = True,
    tuning: CleanerTuning = DEFAULT_TUNING,
) -> StepReport:
    """Evaluate, maybe clean, apply retention. Raises CompactionError on refusal or failure.

    `spark` may be a function returning the session: it is then started only once the cleaning lock is
    held and a cleaning is due (so a refused or idle run never starts a JVM)."""
    now = wall_ms() if now is None else now
    with handle.lock("clean", purpose=f"cleaning at {now}"):
        if gc:
            handle.collect_garbage()
        m, ev = prepare(handle, config, now)
        reason = ev.reason_for(force)
        report = StepReport(
            evaluation=ev,
            reason=reason,
            checkpoint=m.checkpoint,
            log=handle.name,
            before_version=m.version,
            after_version=m.version,
        )
        if reason is not None:
            u = ev.first_uncleanable_offset
            try:
                check_files(handle, m)  # names a missing or corrupt file before Spark reads it
            except CorruptLogError as exc:
                raise _failed_cleaning(handle, m, config, u, None, exc) from exc
            session = cleaning_session(spark, handle.name)
            try:
                out = clean(session, handle, m, config, cleaning_range(m, u), now, progress, tuning)
            except (ConflictError, EngineError):
                raise
            except Exception as exc:
                raise _failed_cleaning(handle, m, config, u, started_session(session), exc) from exc
            m = commit_cleaning(handle, m, out, u, reason, ev)
            report.after_version = m.version
            report.cleaned = True
            report.stats = out.stats
            report.route = out.route
        report.retention = apply_retention(handle, config, now)
        report.checkpoint = handle.manifest().checkpoint
        return report


def _failed_cleaning(
    handle: LogHandle, m: Manifest, config: TopicConfig, u: int, session, exc: Exception
) -> CompactionError:
    """The error a failed cleaning raises: the engine's fault unmarked, the log's marked (naming its file)."""
    if not isinstance(exc, CompactionError):
        if faults.is_engine_fault(exc):
            return _engine_error(handle, exc)
        # a corrupt page? name the file (the cleaned range first)
        found = find_unreadable(handle, m, rewritten_segments(m, u)) or (
            config.strategy != Strategy.OFFSET and find_unreadable(handle, m)
        )
        if found:
            exc = found
        elif session is not None and not faults.engine_answers(session):
            return _engine_error(handle, exc)
    mark_uncleanable(handle, exc)
    return CompactionError(
        f"cleaning of log {handle.name!r} failed, the log is unchanged and marked uncleanable: {_one_line(exc)}"
    )


def _engine_error(handle: LogHandle, exc: BaseException) -> EngineError:
    return EngineError(
        f"cleaning of log {handle.name!r} stopped by an engine fault; the log is unchanged "
        f"and not marked, run it again once Spark is back: {_one_line(exc)}"
    )


@dataclass
class FleetResult:
    """One log of a fleet cleaning (`run_many`): its report, or the one-line error that stopped it."""

    log: str
    report: StepReport | None = None
    error: CompactionError | None = None


def run_many(
    logs: list[tuple[LogHandle, TopicConfig]],
    now: int | None = None,
    *,
    spark=None,
    force: bool = False,
    concurrency: int = 1,
    progress=None,
    tuning: CleanerTuning = DEFAULT_TUNING,
    done=None,
) -> list[FleetResult]:
    """`run` for many logs in one Spark application, `concurrency` at a time; results in input order.
    `done`, when given, is called with each log's result in the thread that cleaned it, as it finishes.

    Small logs are dominated by per-job latency, not by work: running several cleanings at once lets
    their Spark jobs share the session's cores (and its warm Python workers) instead of queueing."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()
    shared: list = []
    engine_down: list[EngineError] = []  # the first engine fault: the fleet's other cleanings do not start

    def session():
        with lock:  # one session for the fleet, started by the first cleaning that needs it, tried once
            if not shared:
                if spark is None and progress is not None:
                    progress("starting Spark")
                try:
                    shared.append(session_of(spark))
                except EngineError as exc:
                    shared.append(exc)
            if isinstance(shared[0], EngineError):
                raise shared[0]
            return shared[0]

    def one(item: tuple[LogHandle, TopicConfig]) -> FleetResult:
        result = cleaned(item)
        if done is not None:  # e.g. a shell that records each log's history as it finishes
            done(result)
        return result

    def cleaned(item: tuple[LogHandle, TopicConfig]) -> FleetResult:
        handle, config = item
        if engine_down:
            return FleetResult(
                handle.name,
                error=EngineError(
                    f"log {handle.name!r} not cleaned, the engine failed earlier in this run (not marked): "
                    f"{engine_down[0]}"
                ),
            )
        try:
            report = run(handle, config, now, spark=session, force=force, progress=progress, tuning=tuning)
        except EngineError as exc:
            engine_down.append(exc)
            return FleetResult(handle.name, error=exc)
        except CompactionError as exc:
            return FleetResult(handle.name, error=exc)
        if progress is not None:  # as each log finishes: a long fleet shows its progress
            progress(f"{handle.name}: {report.summary()}")
        return FleetResult(handle.name, report)

    if concurrency <= 1 or len(logs) <= 1:
        return [one(item) for item in logs]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(logs)), thread_name_prefix="clean") as pool:
        return list(pool.map(one, logs))


def _one_line(exc: BaseException) -> str:
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = text[0] if text else ""
    # Errors raised in Python workers: the useful part is the worker's own last error line.
    cause = next((line for line in reversed(text) if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)), None)
    if cause and cause != first:
        first = f"{first} {cause}"
    return f"{type(exc).__name__}: {first}"[:500]


def mark_uncleanable(handle: LogHandle, exc: BaseException) -> None:
    """Record on the log that a cleaning failed (one line, with time); planners then skip the log."""
    err = _one_line(exc)
    try:
        _commit(handle, lambda m: m.with_(uncleanable=Uncleanable(err, wall_ms())))
    except Exception:  # the log may be unreadable; the error is raised to the caller anyway
        pass


def clear_uncleanable(handle: LogHandle) -> Manifest:
    """Clear the uncleanable mark (an operator action after a repair)."""
    return _commit(handle, lambda m: m.with_(uncleanable=None) if m.uncleanable else None)


@dataclass(frozen=True)
class Removal:
    """Records and logical bytes that an operation would remove."""

    records: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class DryRun:
    """What a cleaning at a given time would do, changing nothing (`dry_run`).

    Without `detail` (metadata only, no Spark) the key-level figures of a due cleaning are None."""

    evaluation: Evaluation
    reason: Reason | None
    would_clean: bool
    superseded: Removal | None = Removal()
    tombstones_expired: Removal | None = Removal()
    tombstones_to_stamp: int | None = 0
    retention: Removal = Removal()
    retention_segments: int = 0
    segments_to_rewrite: int | None = 0
    segments_to_mark: int | None = 0
    detail: bool = True
    segments_in_range: int = 0

    def as_dict(self) -> dict:
        """The dry run as JSON-ready data (the CLI's `plan --dry-run` output)."""
        out = asdict(self)
        out["retention"]["segments"] = out.pop("retention_segments")
        return out


def dry_run(
    handle: LogHandle,
    config: TopicConfig,
    now: int | None = None,
    *,
    spark=None,
    force: bool = False,
    detail: bool = True,
    tuning: CleanerTuning = DEFAULT_TUNING,
) -> DryRun:
    """What a cleaning at `now` would do, changing nothing: the evaluation plus records and bytes that
    would go and why (superseded, tombstone expired, retention); `detail=False` reads metadata only."""
    now = wall_ms() if now is None else now
    m = handle.manifest()
    ev = evaluate(m, config, now)
    virtual = seal_active(m) if ev.deadline_roll else m
    virtual = virtual.with_(checkpoint=ev.first_dirty_offset)
    reason = ev.reason_for(force)
    found: dict = {}
    segments = list(virtual.segments)
    in_range = len(rewritten_segments(virtual, ev.first_uncleanable_offset))
    found["segments_in_range"] = in_range
    if reason is not None and in_range and not detail:
        # the key-level figures need the keys (a Spark job); the manifest cannot give them
        found.update(
            superseded=None,
            tombstones_expired=None,
            tombstones_to_stamp=None,
            segments_to_rewrite=None,
            segments_to_mark=None,
            detail=False,
        )
    elif reason is not None and in_range:
        segments = _key_level(session_of(spark), handle, virtual, config, ev, now, tuning, found)
    if config.delete:
        gone = segments[: retention_cut(segments, config, now)]
        found["retention"] = Removal(sum(s.records for s in gone), sum(s.size for s in gone))
        found["retention_segments"] = len(gone)
    return DryRun(evaluation=ev, reason=reason, would_clean=reason is not None, **found)


def _key_level(
    session,
    handle: LogHandle,
    virtual: Manifest,
    config: TopicConfig,
    ev: Evaluation,
    now: int,
    tuning: CleanerTuning,
    found: dict,
) -> list[Segment]:
    """A dry run's key-level figures (into `found`, by DryRun field) from a decision that writes nothing;
    the log's segments as the cleaning would leave them."""
    check_files(handle, virtual)
    span = cleaning_range(virtual, ev.first_uncleanable_offset)
    d = decide(session, handle, virtual, config, span, now, tuning=tuning)
    d.release()  # the figures are all a dry run needs
    # only winners are in the decision: superseded = read - kept - expired tombstones
    kept_bytes = sum(p.kept_bytes for p in d.figures.values())
    removed_bytes = sum(p.removed_bytes for p in d.figures.values())
    s = d.stats
    found["superseded"] = Removal(
        s.records_read - s.records_written - s.tombstones_removed, s.bytes_read - kept_bytes - removed_bytes
    )
    found["tombstones_expired"] = Removal(s.tombstones_removed, removed_bytes)
    found["tombstones_to_stamp"] = s.tombstones_stamped
    rewrite, mark = chosen_plan(d, tuning)
    found["segments_to_rewrite"] = len(rewrite)
    found["segments_to_mark"] = len(mark)
    k = len(span.segments)
    after = []
    for i, seg in span.segments:
        p = d.figures.get(i)
        after.append(
            Segment(
                new_id(),
                seg.base_offset,
                seg.next_offset,
                records=p.kept if p else 0,
                size=p.kept_bytes if p else 0,
                max_ts=p.max_ts if p else None,
            )
        )
    return merge_layout(after, config.segment_bytes) + list(virtual.segments[k:])
