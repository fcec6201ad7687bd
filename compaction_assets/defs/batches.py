"""Batch runs: many partitions in one run, one process and one Spark session, each partition keeping the
history a run of its own would give it (issue 33).

- `compaction_batch_job` cleans the logs of its run config (`logs`) with `engine.run_many`, and records
  for each log what `compaction_job` records for its partition: materializations of `cleanable_range`,
  `compacted_log` and `latest_state` with the same metadata (defs/history.py builds it for both paths),
  and the four check results with the same names, severity and partition. A failed blocking check
  stops that partition's `latest_state` only.
- `ingest_batch_job` ingests the new landing files of its logs (a `raw_segments` materialization per
  log, as `ingest_job`), then cleans those of them that are due in the same run, as above: a fleet goes
  from landing to cleaned in one run instead of waiting for the next sensor tick.

Each topic's table is committed once, after the batch's cleanings, in one snapshot recording every log's
version (table/group.py): a log's history is yielded as it finishes, but for its `latest_state` and table
check, which follow its topic's commit; a run killed before it leaves cleanings recorded without them.

A log that fails is reported as in a run of its own (the log's fault marks it uncleanable) and the others
commit; the failure is an observation of the asset with `batch_failure` in its metadata (one alert
each, defs/alerts.py), and the step fails at the end, saying how many failed. An engine fault (Spark
down) marks nothing and fails the step retryably. A batch evaluates at one time (`now_ms`, else the
creation time of the run, or of the run it re-executes), so a retry or re-execution skips the logs whose
whole history is already recorded at that time and records, without cleaning again, a cleaning that
was committed but not yet recorded, or recorded in part, when its run was killed (only the events that
run did not record): nothing is lost and nothing is doubled.
"""

import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.engine import FleetResult, StepReport
from compaction_assets.defs.history import (
    COMPACTED_LOG,
    Cleaning,
    checked,
    cleanable_range_metadata,
    compacted_log_metadata,
    event_name,
    latest_state_metadata,
    raw_segments_metadata,
    recorded_cleaning,
    recorded_per_partition,
    recovered_report,
    table_check_record,
)
from compaction_assets.defs.instance_pool import hold_instance_connections
from compaction_assets.defs.jobs import SPARK_POOL, TRANSIENT_RETRY
from compaction_assets.defs.table import LATEST_STATE, TopicRows, read_topics, table_failure, table_metadata
from compaction_assets.errors import CompactionError, CorruptLogError, EngineError, LockedError
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.planning.planner import evaluate
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.group import TopicBatch, TopicOutcome
from resources.log_store import LogStoreResource

FAILURE_KEY = "batch_failure"  # metadata key of the observation that records a log's failure in a batch
LOGS_TAG = "compaction/logs"  # the batch's logs, compactly (batch_requests.py encodes and decodes it)


class BatchConfig(dg.Config):
    """The logs of a batch and the time it evaluates at."""

    logs: list[str] = []
    now_ms: int | None = None  # None: the creation time of the run (or of the run it re-executes)
    force: bool = False  # clean even the logs that are not eligible


@dataclass(frozen=True)
class AwaitingTable:
    """A log recorded up to its latest state's Parquet files, waiting for its topic's table commit: the
    latest_state metadata so far and the cleaned version the checks read (the table check's model)."""

    state_metadata: dict
    after: object = None


@dataclass
class LogOutcome:
    """One log's share of a batch: the events of its history, in order, or why it failed."""

    log: str
    events: list = field(default_factory=list)
    failure: str | None = None
    transient: bool = False  # an engine fault or a held lease: a retry may succeed
    awaiting: AwaitingTable | None = None  # its latest_state waits for its topic's table commit


def batch_now(context: dg.OpExecutionContext, config: BatchConfig) -> int:
    """The batch's time: from config, else its root run's creation (the same for retries and re-executions)."""
    if config.now_ms is not None:
        return config.now_ms
    root = context.run.root_run_id or context.run_id
    record = context.instance.get_run_record_by_id(root) or context.instance.get_run_record_by_id(context.run_id)
    return int(record.create_timestamp.timestamp() * 1000)


def _failed(log: str, asset: str, reason: str, transient: bool = False, marked: bool = False) -> LogOutcome:
    """A failure, recorded on the partition (the alert sensor pages once per such observation)."""
    events = (
        []
        if transient
        else [
            dg.AssetObservation(
                asset_key=asset, partition=log, metadata={FAILURE_KEY: reason, "observed_uncleanable": marked}
            )
        ]
    )
    return LogOutcome(log, events, failure=reason, transient=transient)


def _transient(exc: CompactionError) -> bool:
    return isinstance(exc, (LockedError, EngineError))


class _AsOf:
    """A log handle that reads one manifest version: the dry run of the state a cleaning read."""

    def __init__(self, handle, manifest):
        self._handle, self._manifest = handle, manifest

    def manifest(self):
        return self._manifest

    def __getattr__(self, name):
        return getattr(self._handle, name)


@dataclass
class _Pending:
    """A log the batch cleans: its handle, configuration and the plan recorded as cleanable_range."""

    handle: object
    config: object
    range_metadata: dict


class CleaningBatch:
    """One batch's cleanings: triage, the fleet in one Spark session, each log's history as it finishes."""

    def __init__(
        self, context: dg.OpExecutionContext, log_store: LogStoreResource, spark, now: int, force: bool, only_due: bool
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
            done = recorded_cleaning(self.context.instance, log)
            if done is not None and done.now == self.now:  # recorded by an earlier attempt of this batch ...
                if done.run not in self.runs:
                    self.runs[done.run] = recorded_per_partition(self.context.instance, done.run)
                self.skip[log] = self.runs[done.run].get(log, set())
                if not done.cleaned or LATEST_STATE.to_user_string() in self.skip[log]:
                    return None
                # ... but killed amid its events: the rest of them are recorded now (recovered_report below)
            m = handle.manifest()
            if m.uncleanable and not self.force:
                return LogOutcome(log, failure=f"log {log} is marked uncleanable: {m.uncleanable.error}")
            recovered = recovered_report(handle, cfg, self.now)
            if recovered is not None:
                return self.recorded(
                    handle,
                    self._range(_AsOf(handle, handle.manifest_version(recovered.before_version)), cfg),
                    recovered,
                )
            if self.only_due and not (evaluate(m, cfg, self.now).eligible and not m.uncleanable):
                return None
            return _Pending(handle, cfg, self._range(handle, cfg))
        except CorruptLogError as exc:  # a cleaning attempt: a log it cannot read is uncleanable
            engine.mark_uncleanable(self.log_store.handle(log), exc)
            return _failed(log, "cleanable_range", f"log {log} is marked uncleanable: {exc}", marked=True)
        except CompactionError as exc:
            return _failed(log, "cleanable_range", str(exc), _transient(exc))

    def _range(self, handle, cfg) -> dict:
        dry = engine.dry_run(handle, cfg, self.now, force=self.force, detail=False)
        return cleanable_range_metadata(dry, self.now)

    def recorded(self, handle, range_metadata: dict, rep: StepReport) -> LogOutcome:
        """A cleaning's history: the plan, the cleaning, its checks and (unless one blocks) the latest state."""
        log = handle.name
        events = [
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
            return LogOutcome(
                log,
                events + _failed(log, "compacted_log", f"cannot verify the last cleaning of {log}: {exc}").events,
                failure=str(exc),
            )
        events += [c.evaluation(log) for c in checks]
        blocked = [c.name for c in checks if c.blocks]
        if blocked:  # as a blocking check's failure stops this partition's latest_state step
            return LogOutcome(log, events, failure=f"{log}: blocking check(s) failed: {', '.join(blocked)}")
        try:
            state = latest_state_metadata(self.log_store, handle, self.spark, self.tables)
        except (CompactionError, dg.Failure) as exc:  # dg.Failure: the table's commit refused (defs/table.py)
            reason = getattr(exc, "description", None) or str(exc)
            return LogOutcome(
                log,
                events + _failed(log, "latest_state", reason, _transient(exc)).events,
                failure=reason,
                transient=_transient(exc),
            )
        if self.tables is not None:  # its latest_state follows its topic's table commit (with_table)
            return LogOutcome(log, events, awaiting=AwaitingTable(state, after))
        events.append(dg.AssetMaterialization(asset_key="latest_state", partition=log, metadata=state))
        return LogOutcome(log, events)

    def with_table(self, held: LogOutcome, topic: TopicOutcome | None, topic_rows: TopicRows | None) -> LogOutcome:
        """The rest of a held log's history (its first events are yielded already), after its topic's table
        commit: latest_state, then the table check (on `topic_rows`, the table as read once for the batch)."""
        log, events = held.log, []
        if topic is None or topic.result is None:
            failure = table_failure(log, topic.error if topic is not None else CompactionError("not committed"))
            return LogOutcome(
                log, events + _failed(log, "latest_state", failure.description).events, failure=failure.description
            )
        metadata = {**held.awaiting.state_metadata, **table_metadata(topic.result)}
        events.append(dg.AssetMaterialization(asset_key="latest_state", partition=log, metadata=metadata))
        return self.table_checked(log, events, held.awaiting.after, topic_rows)

    def table_checked(self, log: str, events: list, after=None, topic_rows: TopicRows | None = None) -> LogOutcome:
        """The latest state's table check, as compaction_job runs it after latest_state; `after`, the cleaned
        version as the checks read it (the table check's model reads it no second time)."""
        try:
            record = table_check_record(self.log_store, log, after, topic_rows)
        except CompactionError as exc:
            reason = f"cannot compare the table of {log}: {exc}"
            return LogOutcome(log, events + _failed(log, "latest_state", reason).events, failure=reason)
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
            out = _failed(
                result.log,
                "compacted_log",
                str(result.error),
                _transient(result.error),
                marked=not _transient(result.error),
            )
            out.events.insert(0, range_event)
            return out
        try:
            return self.recorded(item.handle, item.range_metadata, result.report)
        except Exception as exc:  # the history of one log must not stop the others'
            return LogOutcome(result.log, failure=f"{result.log}: recording failed: {exc}", transient=True)

    def _clean_fleet(self, pending: dict[str, _Pending], finished: queue.Queue, errors: list) -> None:
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

    def committed(self, held: list[LogOutcome]):
        """Commit the held logs' topics (one snapshot each), then complete and table-check each log's history
        (the checks in parallel); yield the outcomes."""
        if not held:
            return
        topics = self.tables.commit()
        ok = {o.log: o for o in held if getattr(topics.get(o.log), "result", None) is not None}
        yield from (self.with_table(o, topics.get(o.log), None) for o in held if o.log not in ok)
        sizes = {log: o.awaiting.state_metadata["keys"] for log, o in ok.items()}
        with ThreadPoolExecutor(max_workers=settings.current().clean_concurrency, thread_name_prefix="table") as pool:
            for logs, rows in read_topics(self.log_store, sizes):  # one table scan a group, not one a log
                yield from pool.map(lambda log: self.with_table(ok[log], topics[log], rows), logs)

    def unrecorded(self, outcome: LogOutcome) -> list:
        """The outcome's events but those an earlier attempt of the batch recorded for its log."""
        skip = self.skip.get(outcome.log, ())
        return [e for e in outcome.events if event_name(e) not in skip]

    def run(self, logs: list[str]):
        """Yield every log's events as it finishes (a log whose table commit waits for its topic's, once
        the batch's cleanings are done); return the outcomes."""
        outcomes, pending, held = [], {}, []
        for log in logs:
            step = self.triage(log)
            if isinstance(step, LogOutcome):
                (held if step.awaiting else outcomes).append(step)
                yield from self.unrecorded(step)
            elif step is not None:
                pending[log] = step
        finished: queue.Queue = queue.Queue()
        errors: list[BaseException] = []
        worker = threading.Thread(
            target=self._clean_fleet, args=(pending, finished, errors), name="batch-fleet", daemon=True
        )
        worker.start()
        while (outcome := finished.get()) is not None:
            (held if outcome.awaiting else outcomes).append(outcome)
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


def summarize(context: dg.OpExecutionContext, what: str, logs: list[str], outcomes: list[LogOutcome]) -> None:
    """The step's metadata (how many logs, how many failed) and, when any failed, its failure."""
    failed = [o for o in outcomes if o.failure]
    context.log.info(f"{len(logs) - len(failed)} of {len(logs)} log(s) done, {len(failed)} failed")
    context.add_output_metadata(
        {
            "logs": len(logs),
            "failed": len(failed),
            "failures": dg.MetadataValue.json({o.log: o.failure for o in failed[:100]}),
        }
    )
    if failed:
        # retried only when a retry can help (an engine fault, a held lease): it then redoes those logs only
        raise dg.Failure(
            description=f"{len(failed)} of {len(logs)} log(s) failed to {what}: "
            + "; ".join(o.failure for o in failed[:5])[:1000],
            allow_retries=any(o.transient for o in failed),
        )


def clean_batch(
    context,
    config: BatchConfig,
    log_store: LogStoreResource,
    pyspark,
    logs: list[str],
    only_due: bool,
    earlier: list[LogOutcome] = (),
):
    """Clean `logs` as one batch, yielding each partition's history; fail at the end if any failed."""
    hold_instance_connections(context.instance, context.run_id)  # ~9 events a log: one connection, not one a write
    batch = CleaningBatch(
        context, log_store, lambda: pyspark.spark_session, batch_now(context, config), config.force, only_due
    )
    outcomes = yield from batch.run(logs)
    summarize(
        context, "ingest or clean" if earlier else "clean", [*logs, *(o.log for o in earlier)], [*outcomes, *earlier]
    )
    yield dg.Output(None)


@dg.op(
    pool=SPARK_POOL,
    retry_policy=TRANSIENT_RETRY,
    out=dg.Out(dg.Nothing),
    description="Cleans many logs in one Spark session; each partition's history as its own run records it.",
)
def compaction_batch_op(
    context: dg.OpExecutionContext, config: BatchConfig, log_store: LogStoreResource, pyspark: LazyPySparkResource
):
    """Clean the batch's logs (they were due when the batch was requested)."""
    yield from clean_batch(context, config, log_store, pyspark, list(config.logs), only_due=False)


def _ingest_one(log_store: LogStoreResource, log: str, folders: dict, progress) -> LogOutcome:
    """Ingest one log's new files; its raw_segments materialization, or its failure."""
    try:
        parse_log_name(log, "partition key")
        handle, cfg = log_store.handle(log), log_store.config_for(log)
        if log not in folders:
            if handle.exists():
                return LogOutcome(log)
            raise CompactionError(
                f"log {log!r} does not exist in the store at {log_store.store_location()} and "
                f"has no landing folder under {log_store.landing_area()}"
            )
        report = ingest(handle, cfg, folders[log], progress=progress)
    except CompactionError as exc:
        return _failed(log, "raw_segments", f"ingestion of {log} stopped: {exc}", _transient(exc))
    if not report.files_ingested:  # an earlier attempt of this batch took them
        return LogOutcome(log)
    return LogOutcome(
        log,
        [
            dg.AssetMaterialization(
                asset_key="raw_segments", partition=log, metadata=raw_segments_metadata(report, handle)
            )
        ],
    )


@dataclass(frozen=True)
class Ingested:
    """What the ingestion step hands the cleaning step: logs ingested, failures to report, the run's time and force."""

    logs: list
    failures: list
    now: int
    force: bool


@dg.op(
    retry_policy=TRANSIENT_RETRY,
    out=dg.Out(Ingested),
    description="Ingests the new landing files of many logs, each log's raw_segments as its own run records it.",
)
def ingest_batch_op(context: dg.OpExecutionContext, config: BatchConfig, log_store: LogStoreResource):
    """Ingest the batch's logs; the ones that failed are reported by the cleaning step, which fails the run."""
    hold_instance_connections(context.instance, context.run_id)
    folders, outcomes = landing_logs(log_store.landing_area())[0], []
    for log in config.logs:
        outcome = _ingest_one(log_store, log, folders, None)  # its events show progress (see above)
        outcomes.append(outcome)
        yield from outcome.events
    failed = [o for o in outcomes if o.failure]
    context.log.info(f"ingested {len(outcomes) - len(failed)} of {len(outcomes)} log(s)")
    # not a step failure here: the others' cleaning goes on, and the run fails at its end
    yield dg.Output(
        Ingested(
            [o.log for o in outcomes if not o.failure],
            [LogOutcome(o.log, failure=o.failure, transient=o.transient) for o in failed],
            batch_now(context, config),
            config.force,
        ),
        metadata={
            "logs": len(outcomes),
            "failed": len(failed),
            "failures": dg.MetadataValue.json({o.log: o.failure for o in failed[:100]}),
        },
    )


@dg.op(
    pool=SPARK_POOL,
    retry_policy=TRANSIENT_RETRY,
    out=dg.Out(dg.Nothing),
    description="Cleans, in one Spark session, the just-ingested logs that are due.",
)
def clean_ingested_op(
    context: dg.OpExecutionContext, ingested: Ingested, log_store: LogStoreResource, pyspark: LazyPySparkResource
):
    """Clean the ingested logs that are due (the others wait for the sensors); report the ingestion's failures."""
    config = BatchConfig(logs=list(ingested.logs), now_ms=ingested.now, force=ingested.force)
    yield from clean_batch(
        context, config, log_store, pyspark, list(ingested.logs), only_due=True, earlier=list(ingested.failures)
    )


@dg.job(description="Cleans many logs in one run, each partition's history as compaction_job records it.")
def compaction_batch_job():
    compaction_batch_op()


@dg.job(description="Ingests many logs' new files in one run, then cleans those of them that are due.")
def ingest_batch_job():
    clean_ingested_op(ingest_batch_op())
