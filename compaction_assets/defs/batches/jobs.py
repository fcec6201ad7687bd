"""Batch runs: many partitions in one run, one process and one Spark session, each partition keeping the
history a run of its own would give it.

- `compaction_batch_job` cleans the logs of its run config (`logs`) with `engine.run_many`, and records
  for each log what `compaction_job` records for its partition: materializations of `cleanable_range`,
  `compacted_log` and `latest_state` with the same metadata (defs/history/history.py builds it for both paths),
  and the four check results with the same names, severity and partition. A failed blocking check
  stops that partition's `latest_state` only.
- `ingest_batch_job` ingests the new landing files of its logs (a `raw_segments` materialization per
  log, as `ingest_job`), then cleans those of them that are due in the same run, as above: a fleet goes
  from landing to cleaned in one run instead of waiting for the next sensor tick.

Each topic's table is committed once after the batch's cleanings, in one snapshot recording every log's
version (table/commit/group.py): a log's history is yielded as it finishes, but for its `latest_state` and table
check, which follow its topic's commit; a run killed before it leaves cleanings recorded without them.
`ingest_batch_job` also commits each topic once right after its ingestions (all its ingested logs, due or
not), so that the landed records reach the table without waiting for the cleanings (docs/table.md,
"Freshness"); unless another batch of the same topics is queued or running, whose commits would race its
own: then only the logs it does not go on to clean commit there.

A log that fails is reported as in a run of its own (the log's fault marks it uncleanable) and the others
commit; the failure is an observation of the asset with `batch_failure` in its metadata (one alert
each, defs/alerts.py), and the step fails at the end, saying how many failed. An engine fault (Spark
down) marks nothing and fails the step retryably. A batch evaluates at one time (`now_ms`, else the
creation time of the run, or of the run it re-executes), so a retry or re-execution skips the logs whose
whole history is already recorded at that time and records, without cleaning again, a cleaning that
was committed but not yet recorded, or recorded in part, when its run was killed (only the events that
run did not record): nothing is lost and nothing is doubled.

Here: the batch jobs, their ops and config. How a batch cleans its logs and records their histories is in
defs/batches/cleaning.py; a log's outcome (its events, or its failure) in defs/batches/outcome.py.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from compaction_assets.cleaning.decide.placement import memory_budget
from compaction_assets.defs.alerts import REPORTED_KEY
from compaction_assets.defs.batches.cleaning import CleaningBatch, due
from compaction_assets.defs.batches.instance_pool import hold_instance_connections
from compaction_assets.defs.batches.outcome import BatchEvent, LogOutcome, failed_outcome, is_transient
from compaction_assets.defs.batches.requests import BATCH_JOBS, IN_FLIGHT, LOGS_TAG, decode_logs
from compaction_assets.defs.history.history import raw_segments_metadata
from compaction_assets.defs.jobs import SPARK_POOL, TRANSIENT_RETRY
from compaction_assets.defs.table.table import follow_tables
from compaction_assets.errors import CompactionError, first_line
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.ingest.route import SparkOffer
from compaction_assets.store.names import parse_log_name
from resources.log_store import LogStoreResource


class BatchConfig(dg.Config):
    """The logs of a batch and the time it evaluates at."""

    # pydantic copies a field's default for each instance; a default_factory would leave Dagster's config
    # schema without the default the launchpad shows
    logs: list[str] = []  # noqa: RUF012
    now_ms: int | None = None  # None: the creation time of the run (or of the run it re-executes)
    force: bool = False  # clean even the logs that are not eligible


def batch_now(context: dg.OpExecutionContext, config: BatchConfig) -> int:
    """The batch's time: from config, else its root run's creation (the same for retries and re-executions)."""
    if config.now_ms is not None:
        return config.now_ms
    root = context.run.root_run_id or context.run_id
    record = context.instance.get_run_record_by_id(root) or context.instance.get_run_record_by_id(context.run_id)
    assert record is not None  # the run executing this step has a record
    return int(record.create_timestamp.timestamp() * 1000)


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
            + "; ".join(o.failure for o in failed[:5] if o.failure)[:1000],
            allow_retries=any(o.transient for o in failed),
            # every failure a fault reported already (a log marked before): the run pages nothing new
            metadata={REPORTED_KEY: True} if all(o.reported for o in failed) else None,
        )


def clean_batch(
    context: dg.OpExecutionContext,
    config: BatchConfig,
    log_store: LogStoreResource,
    pyspark: LazyPySparkResource,
    logs: list[str],
    only_due: bool,
    earlier: Sequence[LogOutcome] = (),
) -> Iterator[BatchEvent | dg.Output]:
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


def _ingest_one(log_store: LogStoreResource, log: str, folders: dict, progress, spark: SparkOffer) -> LogOutcome:
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
        report = ingest(handle, cfg, folders[log], progress=progress, spark=spark)
    except CompactionError as exc:
        return failed_outcome(log, "raw_segments", f"ingestion of {log} stopped: {exc}", is_transient(exc))
    except Exception as exc:  # a surprise in one log's files is that log's failure: the others go on
        reason = f"ingestion of {log} stopped: unexpected {type(exc).__name__}: {first_line(exc, 500, blank='')}"
        return failed_outcome(log, "raw_segments", reason)
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


def _not_cleaned_next(log_store: LogStoreResource, logs: list[str], now: int) -> list[str]:
    """The ingested logs that clean_ingested_op does not clean at `now` (not due, or marked uncleanable)."""
    out = []
    for log in logs:
        handle = log_store.handle(log)
        if handle.exists() and not due(handle.manifest(), log_store.config_for(log), now):
            out.append(log)
    return out


def _beside_batches_of_its_topics(context: dg.OpExecutionContext, logs: list[str]) -> bool:
    """True when another batch run, queued or running, holds logs of the topics of `logs` (one query)."""
    topics = {parse_log_name(log)[0] for log in logs}
    runs = context.instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=500)
    return any(
        run.run_id != context.run_id
        and run.job_name in BATCH_JOBS
        and LOGS_TAG in run.tags
        and any(parse_log_name(log)[0] in topics for log in decode_logs(run.tags[LOGS_TAG]))
        for run in runs
    )


@dataclass(frozen=True)
class Ingested:
    """What the ingestion step hands the cleaning step: logs ingested, failures to report, the run's time and force."""

    logs: list[str]
    failures: list[LogOutcome]
    now: int
    force: bool


@dg.op(
    retry_policy=TRANSIENT_RETRY,
    out=dg.Out(Ingested),
    description="Ingests the new landing files of many logs, each log's raw_segments as its own run records it.",
)
def ingest_batch_op(
    context: dg.OpExecutionContext, config: BatchConfig, log_store: LogStoreResource, pyspark: LazyPySparkResource
):
    """Ingest the batch's logs; the ones that failed are reported by the cleaning step, which fails the run. A
    log's backlog past the memory budget is read and shaped by Spark tasks (the session opened only then)."""
    hold_instance_connections(context.instance, context.run_id)
    folders, outcomes = landing_logs(log_store.landing_area(), log_store.store.storage)[0], []
    offer = SparkOffer(lambda: pyspark.spark_session, memory_budget())  # the same for every log of the batch
    for log in config.logs:
        outcome = _ingest_one(log_store, log, folders, None, offer)  # its events show progress (see above)
        outcomes.append(outcome)
        yield from outcome.events
    failed = [o for o in outcomes if o.failure]
    context.log.info(f"ingested {len(outcomes) - len(failed)} of {len(outcomes)} log(s)")
    now = batch_now(context, config)
    ingested = [o.log for o in outcomes if not o.failure]
    # the tables follow every ingested log now, one snapshot per topic: the landed records reach the table
    # without waiting for the batch's cleanings (whose step commits the cleaned versions again, once). Not
    # when another batch of the same topics runs beside this one: the two commit the topic at the same
    # moments, and each commit that loses the race is redone whole; then only the logs the cleaning step
    # leaves alone commit here, the others after their cleaning
    if _beside_batches_of_its_topics(context, ingested):
        ingested = _not_cleaned_next(log_store, ingested, now)
    follow_tables(log_store, ingested, now, context.log.warning)
    # not a step failure here: the others' cleaning goes on, and the run fails at its end
    yield dg.Output(
        Ingested(
            [o.log for o in outcomes if not o.failure],
            [LogOutcome(o.log, failure=o.failure, transient=o.transient) for o in failed],
            now,
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
