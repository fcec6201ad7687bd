"""One evaluation of a log at `now`, as every shell (CLI, conformance runner, Dagster) runs it, and the
same for many logs at once (`run_many`) or without changing anything (`dry_run`).

An evaluation that may clean (SPEC §1, §3, §5, §6), under the log's cleaning lock (Kafka's `doClean`):
  1. prepares: collects garbage, then seals the active segment if its deadline passed, resets a
     checkpoint outside [log_start, LEO] and forgets remembered deletes that expired (one commit);
  2. cleans if the log is eligible (or forced) and commits the cleaning's output;
  3. applies retention when the policy has `delete`.
The commits are commits.py's; the cleaning is cleaner.py's. A failed cleaning changes nothing and marks
the log uncleanable until a later success or an operator, unless the fault is the engine's (faults.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace

from compaction_assets.cleaning import faults
from compaction_assets.cleaning.cleaner import CleanOutput, Route, clean, decide
from compaction_assets.cleaning.commits import Mark as Mark

# The evaluation's commits, named here too: the shells and tests call them as `engine.<name>`.
from compaction_assets.cleaning.commits import Retention, commit_cleaning, retention_cut
from compaction_assets.cleaning.commits import apply_retention as apply_retention
from compaction_assets.cleaning.commits import clear_uncleanable as clear_uncleanable
from compaction_assets.cleaning.commits import mark_uncleanable as mark_uncleanable
from compaction_assets.cleaning.commits import prepare as prepare
from compaction_assets.cleaning.decide.decision import CleaningStats, Decision
from compaction_assets.cleaning.decide.placement import Placement, place
from compaction_assets.cleaning.layout import chosen_plan, foreseen_segments
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.errors import (
    CompactionError,
    ConflictError,
    CorruptLogError,
    EngineError,
    SuspectEngineFault,
    os_error_message,
)
from compaction_assets.log.reader import check_files
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
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig


@dataclass
class StepReport:
    """One evaluation of a log (`run`): whether and why it was cleaned, the cleaning's totals, retention."""

    evaluation: Evaluation
    cleaned: bool = False
    reason: Reason | None = None
    # --force was given (SPEC §5 keeps the evaluation's own reason when the log was eligible anyway)
    forced: bool = False
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
        assert s is not None, "a cleaned step has its cleaning's totals"
        why = f"{self.reason}, forced: eligible anyway" if self.forced and self.reason != Reason.FORCED else self.reason
        return f"cleaned ({why}) {s.records_read} -> {s.records_written} records in {s.clean_time_secs:.1f}s"

    def as_dict(self) -> dict:
        """The report as JSON-ready data (the CLI's `clean` output)."""
        d = asdict(self)
        d.pop("route")
        d["evaluation"] = self.evaluation.as_dict()
        return d


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
    try:
        with handle.lock("clean", purpose=f"cleaning at {now}"):
            try:
                return _run_locked(handle, config, now, spark, force, progress, gc, tuning)
            except BaseException:  # a failed or interrupted cleaning removes what it wrote, under its lock
                faults.remove_cleaning_outputs(handle)
                raise
    except OSError as exc:  # outside the cleaning proper (the lock, a manifest): never the log's data
        if faults.machine_fault(exc) is not None:
            raise faults.machine_error(handle, exc) from exc
        if faults.is_engine_fault(exc):
            raise faults.engine_error(handle, exc) from exc
        raise CompactionError(f"cleaning of log {handle.name!r} failed: {os_error_message(exc)}") from exc


def _run_locked(
    handle: LogHandle,
    config: TopicConfig,
    now: int,
    spark,
    force: bool,
    progress,
    gc: bool,
    tuning: CleanerTuning,
) -> StepReport:
    """`run`'s evaluation, with the cleaning lock held."""
    if gc:
        handle.collect_garbage()
    m, ev = prepare(handle, config, now)
    reason = ev.reason_for(force)
    report = StepReport(
        evaluation=ev,
        reason=reason,
        forced=force,
        checkpoint=m.checkpoint,
        log=handle.name,
        before_version=m.version,
        after_version=m.version,
    )
    if reason is not None:
        out = _clean(handle, config, m, ev, now, spark, progress, tuning)
        committed = commit_cleaning(handle, m, out, ev.first_uncleanable_offset, reason, ev)
        report.after_version = committed.version
        report.cleaned = True
        report.stats = out.stats
        report.route = out.route
    report.retention = apply_retention(handle, config, now)
    report.checkpoint = handle.manifest().checkpoint
    return report


def _clean(
    handle: LogHandle,
    config: TopicConfig,
    m: Manifest,
    ev: Evaluation,
    now: int,
    spark,
    progress,
    tuning: CleanerTuning,
) -> CleanOutput:
    """The cleaning of `m` below the evaluation's first uncleanable offset, its files checked first; a
    failure is raised as `faults.failed_cleaning` says (a conflict or the engine's refusal as it is)."""
    u = ev.first_uncleanable_offset
    try:
        check_files(handle, m)  # names a missing or corrupt file before Spark reads it
    except CorruptLogError as exc:
        raise faults.failed_cleaning(handle, m, config, u, None, exc) from exc
    session = cleaning_session(spark, handle.name)
    try:
        return clean(session, handle, m, config, cleaning_range(m, u), now, progress, tuning)
    except (ConflictError, EngineError):
        raise
    except Exception as exc:
        raise faults.failed_cleaning(handle, m, config, u, started_session(session), exc) from exc


@dataclass
class FleetResult:
    """One log of a fleet cleaning (`run_many`): its report, or the one-line error that stopped it."""

    log: str
    report: StepReport | None = None
    error: CompactionError | None = None


@dataclass
class _Fleet:
    """What the cleanings of one `run_many` share: their options, one Spark session and the first engine
    fault (after which the fleet's other cleanings do not start)."""

    spark: object  # as `run` takes it
    now: int | None
    force: bool
    progress: Callable[[str], None] | None
    tuning: CleanerTuning
    done: Callable[[FleetResult], None] | None
    engine_down: list[EngineError] = field(default_factory=list, init=False)
    _started: list = field(default_factory=list, init=False)  # the session, or the EngineError that stopped it
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def session(self):
        """The fleet's session, started by the first cleaning that needs it and tried once."""
        with self._lock:
            if not self._started:
                if self.spark is None and self.progress is not None:
                    self.progress("starting Spark")
                try:
                    self._started.append(session_of(self.spark))
                except EngineError as exc:
                    self._started.append(exc)
            if isinstance(self._started[0], EngineError):
                raise self._started[0]
            return self._started[0]

    def clean(self, item: tuple[LogHandle, TopicConfig]) -> FleetResult:
        """One log's result, handed to `done` (e.g. a shell recording each log's history as it finishes)."""
        result = self._cleaned(*item)
        if self.done is not None:
            self.done(result)
        return result

    def _cleaned(self, handle: LogHandle, config: TopicConfig) -> FleetResult:
        if self.engine_down:
            return FleetResult(
                handle.name,
                error=EngineError(
                    f"log {handle.name!r} not cleaned, the engine failed earlier in this run (not marked): "
                    f"{self.engine_down[0]}"
                ),
            )
        try:
            report = run(
                handle,
                config,
                self.now,
                spark=self.session,
                force=self.force,
                progress=self.progress,
                tuning=self.tuning,
            )
        except SuspectEngineFault as exc:  # the engine answers: the other logs go on (faults.py)
            return FleetResult(handle.name, error=exc)
        except EngineError as exc:
            self.engine_down.append(exc)
            return FleetResult(handle.name, error=exc)
        except CompactionError as exc:
            return FleetResult(handle.name, error=exc)
        if self.progress is not None:  # as each log finishes: a long fleet shows its progress
            self.progress(f"{handle.name}: {report.summary()}")
        return FleetResult(handle.name, report)


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
    fleet = _Fleet(spark, now, force, progress, tuning, done)
    if concurrency <= 1 or len(logs) <= 1:
        return [fleet.clean(item) for item in logs]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(logs)), thread_name_prefix="clean") as pool:
        return list(pool.map(fleet.clean, logs))


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
    # where a detailed dry run's cleaning would run and why (not in `as_dict`)
    placement: Placement | None = field(default=None, compare=False)

    def as_dict(self) -> dict:
        """The dry run as JSON-ready data (the CLI's `plan --dry-run` output)."""
        out = asdict(replace(self, placement=None))
        out.pop("placement")
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
    in_range = len(rewritten_segments(virtual, ev.first_uncleanable_offset))
    dry = DryRun(evaluation=ev, reason=reason, would_clean=reason is not None, segments_in_range=in_range)
    segments = list(virtual.segments)
    if reason is not None and in_range and not detail:
        # the key-level figures need the keys (a Spark job); the manifest cannot give them
        dry = replace(
            dry,
            superseded=None,
            tombstones_expired=None,
            tombstones_to_stamp=None,
            segments_to_rewrite=None,
            segments_to_mark=None,
            detail=False,
        )
    elif reason is not None and in_range:
        check_files(handle, virtual)
        span = cleaning_range(virtual, ev.first_uncleanable_offset)
        session = session_of(spark)
        placement = place(session, config, span, tuning)
        decision = decide(session, handle, virtual, config, span, now, tuning=tuning, placement=placement)
        decision.release()  # the figures are all a dry run needs
        dry = replace(_key_level(dry, decision, tuning), placement=placement)
        range_segs = [seg for _, seg in span.segments]
        segments = foreseen_segments(range_segs, decision, config.segment_bytes) + list(
            virtual.segments[len(range_segs) :]
        )
    if config.delete:
        gone = segments[: retention_cut(segments, config, now)]
        dry = replace(
            dry,
            retention=Removal(sum(s.records for s in gone), sum(s.size for s in gone)),
            retention_segments=len(gone),
        )
    return dry


def _key_level(dry: DryRun, decision: Decision, tuning: CleanerTuning) -> DryRun:
    """`dry` with the key-level figures of a decision that writes nothing."""
    # only winners are in the decision: superseded = read - kept - expired tombstones
    kept_bytes = sum(p.kept_bytes for p in decision.figures.values())
    removed_bytes = sum(p.removed_bytes for p in decision.figures.values())
    s = decision.stats
    rewrite, mark = chosen_plan(decision, tuning)
    return replace(
        dry,
        superseded=Removal(
            s.records_read - s.records_written - s.tombstones_removed, s.bytes_read - kept_bytes - removed_bytes
        ),
        tombstones_expired=Removal(s.tombstones_removed, removed_bytes),
        tombstones_to_stamp=s.tombstones_stamped,
        segments_to_rewrite=len(rewrite),
        segments_to_mark=len(mark),
    )
