"""One batch's cleanings (defs/batches/jobs.py runs them): which of its logs to clean, skip or only record
(triage), the fleet cleaned in one Spark session, and each log's history recorded as it finishes, as a
run of the partition's own records it: plan, cleaning, checks, then the latest state. With the topics'
tables on, a log's latest state waits for its topic's commit, once per topic after the fleet's cleanings.

A batch evaluates at one time, so a retry or re-execution skips the logs whose whole history is already
recorded at that time and records, without cleaning again, a cleaning that was committed but not yet
recorded (or recorded in part) when its run was killed."""

import itertools
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import dagster as dg

from compaction_assets import settings
from compaction_assets.checks.model import LogView
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.engine import FleetResult, StepReport
from compaction_assets.defs.batches.outcome import (
    AwaitingTable,
    BatchEvent,
    LogOutcome,
    failed_outcome,
    is_transient,
)
from compaction_assets.defs.history.history import (
    COMPACTED_LOG,
    Cleaning,
    checked,
    cleanable_range_metadata,
    compacted_log_metadata,
    latest_state_metadata,
    table_check_record,
)
from compaction_assets.defs.history.recorded import (
    event_name,
    recorded_cleaning,
    recorded_per_partition,
    recovered_report,
)
from compaction_assets.defs.table.table import (
    LATEST_STATE,
    TopicRows,
    lag_metadata,
    read_topics,
    table_metadata,
    table_refusal,
)
from compaction_assets.errors import AlreadyReportedError, CompactionError, CorruptLogError
from compaction_assets.planning.planner import evaluate
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.group import TopicBatch, TopicOutcome
from compaction_assets.topics.config import TopicConfig
from resources.log_store import LogStoreResource


class _AsOf:
    """A log handle that reads one manifest version: the dry run of the state a cleaning read."""

    def __init__(self, handle: LogHandle, manifest: Manifest):
        self._handle, self._manifest = handle, manifest

    def manifest(self) -> Manifest:
        return self._manifest

    def __getattr__(self, name):
        return getattr(self._handle, name)


@dataclass
class _Pending:
    """A log the batch cleans: its handle, configuration and the plan recorded as cleanable_range."""

    handle: LogHandle
    config: TopicConfig
    range_metadata: dict


class CleaningBatch:
    """One batch's cleanings: triage, the fleet in one Spark session, each log's history as it finishes."""

    def __init__(
        self,
        context: dg.OpExecutionContext,
        log_store: LogStoreResource,
        spark: Callable[[], object],
        now: int,
        force: bool,
        only_due: bool,
    ):
        self.context, self.log_store, self.spark = context, log_store, spark
        self.now, self.force, self.only_due = now, force, only_due
        # a retry's logs whose history an earlier attempt recorded in part: what it recorded, per run
        self.runs: dict[str, dict[str, set[str]]] = {}
        self.skip: dict[str, set[str]] = {}
        tables = settings.current().tables  # each topic's logs committed once, after the cleanings (or off)
        self.tables = TopicBatch(tables.pending_bytes) if tables.enabled else None

    def triage(self, log: str) -> LogOutcome | _Pending | None:
        """What to do with one log: a failure, a recorded outcome, a cleaning to run, or nothing."""
        try:
            parse_log_name(log, "partition key")
            handle = self.log_store.handle(log, must_exist=True)
            cfg = self.log_store.config_for(log)
            if self._recorded_already(log):
                return None
            m = handle.manifest()
            if m.uncleanable and not self.force:
                # reported when it was marked: the run fails on it, the alert is not sent again
                return LogOutcome(log, failure=f"log {log} is marked uncleanable: {m.uncleanable.error}", reported=True)
            recovered = recovered_report(handle, cfg, self.now)
            if recovered is not None:
                return self.recorded(
                    handle,
                    self._range(_AsOf(handle, handle.manifest_version(recovered.before_version)), cfg),
                    recovered,
                )
            if self.only_due and not due(m, cfg, self.now):
                return None
            return _Pending(handle, cfg, self._range(handle, cfg))
        except CorruptLogError as exc:  # a cleaning attempt: a log it cannot read is uncleanable
            mark = engine.mark_uncleanable(self.log_store.handle(log), exc)
            reason = f"log {log} is marked uncleanable: {exc}"
            return failed_outcome(log, "cleanable_range", reason, marked=True, reported=mark is engine.Mark.ALREADY)
        except CompactionError as exc:
            return failed_outcome(log, "cleanable_range", str(exc), is_transient(exc))

    def _recorded_already(self, log: str) -> bool:
        """True when an earlier attempt of this batch recorded the log's whole history; when it recorded a
        part of it, what it recorded goes into `skip` (the rest is recorded now: recovered_report)."""
        done = recorded_cleaning(self.context.instance, log)
        if done is None or done.now != self.now:
            return False
        if done.run not in self.runs:
            self.runs[done.run] = recorded_per_partition(self.context.instance, done.run)
        self.skip[log] = self.runs[done.run].get(log, set())
        return not done.cleaned or LATEST_STATE.to_user_string() in self.skip[log]

    def _range(self, handle, cfg: TopicConfig) -> dict:
        dry = engine.dry_run(handle, cfg, self.now, force=self.force, detail=False)
        return cleanable_range_metadata(dry, self.now)

    def recorded(self, handle: LogHandle, range_metadata: dict, rep: StepReport) -> LogOutcome:
        """A cleaning's history: the plan, the cleaning, its checks and (unless one blocks) the latest state."""
        log = handle.name
        events: list[BatchEvent] = [
            dg.AssetMaterialization(asset_key="cleanable_range", partition=log, metadata=range_metadata),
            dg.AssetMaterialization(
                asset_key=COMPACTED_LOG,
                partition=log,
                metadata=compacted_log_metadata(self.log_store, handle, rep, self.now),
            ),
        ]
        cleaning = Cleaning(
            before=rep.before_version,
            after=rep.after_version,
            now=self.now,
            cleaned=rep.cleaned,
            run=self.context.run_id,
        )
        try:
            checks, after = checked(self.log_store, log, cleaning)
        except CompactionError as exc:
            reason = f"cannot verify the last cleaning of {log}: {exc}"
            return LogOutcome(log, events + failed_outcome(log, "compacted_log", reason).events, failure=str(exc))
        events += [c.evaluation(log) for c in checks]
        blocked = [c.name for c in checks if c.blocks]
        if blocked:  # as a blocking check's failure stops this partition's latest_state step
            return LogOutcome(log, events, failure=f"{log}: blocking check(s) failed: {', '.join(blocked)}")
        try:
            state = latest_state_metadata(self.log_store, handle, self.spark, self.tables)
        except (CompactionError, dg.Failure) as exc:  # dg.Failure: the table's commit refused (defs/table/table.py)
            reason = getattr(exc, "description", None) or str(exc)
            return LogOutcome(
                log,
                events + failed_outcome(log, "latest_state", reason, is_transient(exc)).events,
                failure=reason,
                transient=is_transient(exc),
            )
        if self.tables is not None:  # its latest_state follows its topic's table commit (with_table)
            return LogOutcome(log, events, awaiting=AwaitingTable(state, after))
        events.append(dg.AssetMaterialization(asset_key="latest_state", partition=log, metadata=state))
        return LogOutcome(log, events)

    def with_table(
        self, log: str, awaiting: AwaitingTable, topic: TopicOutcome | None, topic_rows: TopicRows | None
    ) -> LogOutcome:
        """The rest of a held log's history (its first events are yielded already), after its topic's table
        commit: latest_state, then the table check (on `topic_rows`, the table as read once for the batch)."""
        events: list[BatchEvent] = []
        if topic is None or topic.result is None:
            error = topic.error if topic is not None else None
            reason = table_refusal(log, error or CompactionError("not committed"))
            return LogOutcome(log, events + failed_outcome(log, "latest_state", reason).events, failure=reason)
        marks = topic_rows.marks if topic_rows is not None else None  # the table as read once for the group
        lag = lag_metadata(self.log_store.handle(log), self.log_store.config_for(log), marks)
        metadata = {**awaiting.state_metadata, **table_metadata(topic.result), **lag}
        events.append(dg.AssetMaterialization(asset_key="latest_state", partition=log, metadata=metadata))
        return self.table_checked(log, events, awaiting.after, topic_rows)

    def table_checked(
        self, log: str, events: list[BatchEvent], after: LogView | None = None, topic_rows: TopicRows | None = None
    ) -> LogOutcome:
        """The latest state's table check, as compaction_job runs it after latest_state; `after`, the cleaned
        version as the checks read it (the table check's model reads it no second time)."""
        try:
            record = table_check_record(self.log_store, log, after, topic_rows)
        except CompactionError as exc:
            reason = f"cannot compare the table of {log}: {exc}"
            return LogOutcome(log, events + failed_outcome(log, "latest_state", reason).events, failure=reason)
        events.append(record.evaluation(log))
        return LogOutcome(
            log, events, failure=f"{log}: blocking check failed: {record.name}" if record.blocks else None
        )

    def finished(self, pending: dict[str, _Pending], result: FleetResult) -> LogOutcome:
        """A cleaned log's outcome (in the thread that cleaned it, so checks and states run in parallel)."""
        item = pending[result.log]
        if result.error is not None:
            range_event = dg.AssetMaterialization(
                asset_key="cleanable_range", partition=result.log, metadata=item.range_metadata
            )
            transient = is_transient(result.error)
            reported = isinstance(result.error, AlreadyReportedError)  # another run marked the log first
            out = failed_outcome(
                result.log, "compacted_log", str(result.error), transient, marked=not transient, reported=reported
            )
            out.events.insert(0, range_event)
            return out
        assert result.report is not None  # a fleet's result holds its report or its error
        try:
            return self.recorded(item.handle, item.range_metadata, result.report)
        except Exception as exc:  # the history of one log must not stop the others'
            return LogOutcome(result.log, failure=f"{result.log}: recording failed: {exc}", transient=True)

    def _clean_fleet(
        self, pending: dict[str, _Pending], finished: queue.Queue[LogOutcome | None], errors: list[BaseException]
    ) -> None:
        """Clean the pending logs; each outcome goes to `finished` once recorded, then None."""
        concurrency = settings.current().clean_concurrency
        # A log's checks and latest state run in a pool of their own, not in the thread that cleaned it: the
        # engine's work and this process's recording overlap (its table commit waits for the fleet's end).
        recorders = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="record")
        try:
            engine.run_many(
                [(p.handle, p.config) for p in pending.values()],
                self.now,
                spark=self.spark,
                force=self.force,
                concurrency=concurrency,
                tuning=self.log_store.cleaner_tuning(),
                # no per-log progress lines: each is a row of the run's event log, and the logs'
                # own events already show the batch's progress
                done=lambda r: recorders.submit(lambda: finished.put(self.finished(pending, r))),
            )
        except BaseException as exc:
            errors.append(exc)
        finally:
            recorders.shutdown(wait=True)
            finished.put(None)

    def committed(self, held: dict[str, AwaitingTable]) -> Iterator[LogOutcome]:
        """Commit the held logs' topics (one snapshot each), then complete and table-check each log's history
        (the checks in parallel); yield the outcomes."""
        if self.tables is None or not held:  # a log is held only while the tables are on
            return
        topics = self.tables.commit()
        ok = {log: awaiting for log, awaiting in held.items() if getattr(topics.get(log), "result", None) is not None}
        yield from (self.with_table(log, a, topics.get(log), None) for log, a in held.items() if log not in ok)
        sizes = {log: awaiting.state_metadata["keys"] for log, awaiting in ok.items()}
        with ThreadPoolExecutor(max_workers=settings.current().clean_concurrency, thread_name_prefix="table") as pool:
            for logs, rows in read_topics(self.log_store, sizes):  # one table scan a group, not one a log
                yield from pool.map(
                    self.with_table,
                    logs,
                    [ok[log] for log in logs],
                    [topics[log] for log in logs],
                    itertools.repeat(rows),
                )

    def unrecorded(self, outcome: LogOutcome) -> list[BatchEvent]:
        """The outcome's events but those an earlier attempt of the batch recorded for its log."""
        skip = self.skip.get(outcome.log, set())
        return [e for e in outcome.events if event_name(e) not in skip]

    def run(self, logs: list[str]) -> Generator[BatchEvent, None, list[LogOutcome]]:
        """Yield every log's events as it finishes (a log whose table commit waits for its topic's, once
        the batch's cleanings are done); return the outcomes."""
        outcomes: list[LogOutcome] = []
        pending: dict[str, _Pending] = {}
        held: dict[str, AwaitingTable] = {}  # its latest_state follows its topic's commit
        for log in logs:
            step = self.triage(log)
            if isinstance(step, LogOutcome):
                _keep(step, outcomes, held)
                yield from self.unrecorded(step)
            elif step is not None:
                pending[log] = step
        finished: queue.Queue[LogOutcome | None] = queue.Queue()
        errors: list[BaseException] = []
        worker = threading.Thread(
            target=self._clean_fleet, args=(pending, finished, errors), name="batch-fleet", daemon=True
        )
        worker.start()
        while (outcome := finished.get()) is not None:
            _keep(outcome, outcomes, held)
            yield from self.unrecorded(outcome)  # a held log's too: its latest_state follows its topic's commit
        worker.join()
        # a kill before this leaves the held logs' cleanings recorded without their latest_state: a retry
        # records the rest of their history (triage) and commits their tables then
        for outcome in self.committed(held):
            outcomes.append(outcome)
            yield from self.unrecorded(outcome)
        if errors:  # not a log's fault: the step fails (and retries), the logs recorded so far stay recorded
            raise errors[0]
        return outcomes


def due(manifest: Manifest, config: TopicConfig, now: int) -> bool:
    """True when a batch that cleans only its due logs (after its ingestions) cleans this one at `now`."""
    return evaluate(manifest, config, now).eligible and not manifest.uncleanable


def _keep(outcome: LogOutcome, outcomes: list[LogOutcome], held: dict[str, AwaitingTable]) -> None:
    """An outcome kept as the batch's, or held until its topic's table commit."""
    if outcome.awaiting is not None:
        held[outcome.log] = outcome.awaiting
    else:
        outcomes.append(outcome)
