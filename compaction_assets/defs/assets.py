"""The partitioned assets: raw segments (ingestion), the cleanable range (plan), the compacted log
(the cleaning; its checks are in defs/checks.py) and the latest state. Every decision is the engine's."""

import warnings

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.decide.placement import memory_budget
from compaction_assets.defs.alerts import REPORTED_KEY
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.history.history import (
    cleanable_range_metadata,
    compacted_log_metadata,
    latest_state_metadata,
    raw_segments_metadata,
)
from compaction_assets.defs.jobs import SPARK_POOL, TRANSIENT_RETRY, refuse
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.defs.table.table import LATEST_STATE, follow_tables
from compaction_assets.errors import AlreadyReportedError, CompactionError, CorruptLogError, LogNameError, transient
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.ingest.report import IngestReport
from compaction_assets.ingest.route import SparkOffer
from compaction_assets.store.names import parse_log_name
from resources.log_store import LogStoreResource

# Per-partition check history needs partitioned check specs, a preview feature in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


class CleaningConfig(dg.Config):
    force: bool = False  # clean even when the log is not eligible (SPEC §5)
    now_ms: int | None = None  # evaluate at this time instead of the clock (replays, tests)
    dry_run_detail: bool = False  # cleanable_range: key-level dry run (a Spark job) instead of metadata only


def _config(log_store: LogStoreResource, log: str):
    """The log's stored configuration; one that does not read back fails the step in one line, and is not
    retried (it reads the same on every try; the sensors request a run again once it changes), unless the
    store did not answer (a server restarting: the next try may read it)."""
    try:
        return log_store.config_for(log)
    except CompactionError as exc:
        raise dg.Failure(description=str(exc), metadata={"log": log}, allow_retries=transient(exc)) from None


def _log(context) -> str:
    """The partition key, refused (one line, nothing read or written) unless it is a valid log name."""
    log = context.partition_key
    try:
        parse_log_name(log, "partition key")
    except LogNameError as exc:
        raise refuse(str(exc)) from None
    return log


def _existing(log_store: LogStoreResource, log: str):
    """The log's handle; a log that does not exist fails the step with one line naming it."""
    handle = log_store.handle(log)
    if not handle.exists():
        raise refuse(
            f"log {log!r} does not exist in the store at {log_store.store_location()} "
            f"(nothing landed for it yet, or it was removed)"
        )
    return handle


def _failure(exc: CompactionError, log: str) -> dg.Failure:
    """A step failure: retried when transient (another holder of the log's lease, an engine fault such as
    a Spark Connect server that is down, a store that did not answer), else one line, final; a fault another
    run marked and reported first is not paged again (defs/alerts.py)."""
    reported = {REPORTED_KEY: True} if isinstance(exc, AlreadyReportedError) else {}
    return dg.Failure(description=str(exc), metadata={"log": log, **reported}, allow_retries=transient(exc))


def _commits_later(context: dg.AssetExecutionContext) -> bool:
    """True when the run also materializes latest_state, which commits the table after the cleaning (the
    run's selection: `selected_asset_keys` is this step's only)."""
    return LATEST_STATE in (context.run.asset_selection or context.job_def.asset_layer.executable_asset_keys)


@dg.asset(
    partitions_def=log_partitions,
    group_name="compaction",
    kinds={"parquet"},
    retry_policy=TRANSIENT_RETRY,
    description="Ingests new files from <landing>/<topic>/partition=<p>/ into the log, each file at most once.",
)
def raw_segments(
    context: dg.AssetExecutionContext, log_store: LogStoreResource, pyspark: LazyPySparkResource
) -> dg.MaterializeResult:
    """Ingest the partition's new landing files into its log (a backlog past the memory budget read and shaped
    by Spark tasks, its session opened only then)."""
    log = _log(context)
    handle, cfg = log_store.handle(log), _config(log_store, log)
    folder = landing_logs(log_store.landing_area(), log_store.store.storage)[0].get(log)
    if folder is None and not log_store.handle(log).exists():
        raise refuse(
            f"log {log!r} does not exist in the store at {log_store.store_location()} and has no "
            f"landing folder under {log_store.landing_area()}"
        )
    report = IngestReport()  # no landing folder: nothing to ingest, the log's size is still reported
    if folder is not None:
        try:
            offer = SparkOffer(lambda: pyspark.spark_session, memory_budget())
            report = ingest(handle, cfg, folder, progress=context.log.info, spark=offer)
        except CompactionError as exc:
            raise dg.Failure(
                description=f"ingestion of {log} stopped: {exc}",
                metadata={"log": log, "reason": str(exc)},
                allow_retries=transient(exc),
            ) from None
    # the table follows the log now, not at the next cleaning; a run that goes on to latest_state commits
    # once, after its cleaning (as a batch does)
    if handle.exists() and not _commits_later(context):
        follow_tables(log_store, [log], now_ms(), context.log.warning)
    return dg.MaterializeResult(metadata=raw_segments_metadata(report, handle))


@dg.asset(
    partitions_def=log_partitions,
    group_name="compaction",
    kinds={"spark"},
    deps=[raw_segments],
    pool=SPARK_POOL,
    retry_policy=TRANSIENT_RETRY,
    description="The plan (SPEC §3-§5) and a dry run: what a cleaning would remove and why.",
)
def cleanable_range(
    context: dg.AssetExecutionContext, config: CleaningConfig, log_store: LogStoreResource, pyspark: LazyPySparkResource
) -> dg.MaterializeResult:
    """Plan the partition's cleaning and dry-run it: what would go and why."""
    log = _log(context)
    now = config.now_ms if config.now_ms is not None else now_ms()
    handle = _existing(log_store, log)
    try:
        dry = engine.dry_run(
            handle,
            _config(log_store, log),
            now,
            spark=lambda: pyspark.spark_session,
            force=config.force,
            detail=config.dry_run_detail,
            tuning=log_store.cleaner_tuning(),
        )
    except CorruptLogError as exc:  # this job is a cleaning attempt: a log it cannot read is uncleanable
        reported = engine.mark_uncleanable(handle, exc) is engine.Mark.ALREADY  # another run marked it first
        raise dg.Failure(
            description=f"log {log} is marked uncleanable: {exc}",
            metadata={"log": log, **({REPORTED_KEY: True} if reported else {})},
            allow_retries=False,
        ) from None
    except CompactionError as exc:
        raise _failure(exc, log) from None
    return dg.MaterializeResult(metadata=cleanable_range_metadata(dry, now))


@dg.asset(
    partitions_def=log_partitions,
    group_name="compaction",
    kinds={"spark"},
    deps=[cleanable_range],
    pool=SPARK_POOL,
    retry_policy=TRANSIENT_RETRY,
    description="Cleans the log (SPEC §6) when eligible or forced, then applies retention; its four checks "
    "(defs/checks.py) verify the cleaning it records.",
)
def compacted_log(
    context: dg.AssetExecutionContext, config: CleaningConfig, log_store: LogStoreResource, pyspark: LazyPySparkResource
) -> dg.MaterializeResult:
    """Clean the partition's log when due (or forced), apply retention, and record what the checks verify."""
    log = _log(context)
    handle, cfg = _existing(log_store, log), _config(log_store, log)
    now = config.now_ms if config.now_ms is not None else now_ms()
    try:
        rep = engine.run(
            handle,
            cfg,
            now,
            spark=lambda: pyspark.spark_session,
            force=config.force,
            progress=context.log.info,
            tuning=log_store.cleaner_tuning(),
        )
    except CompactionError as exc:
        raise _failure(exc, log) from None
    return dg.MaterializeResult(metadata=compacted_log_metadata(log_store, handle, rep, now))


@dg.asset(
    partitions_def=log_partitions,
    group_name="compaction",
    kinds={"spark", "parquet"},
    deps=[compacted_log],
    pool=SPARK_POOL,
    retry_policy=TRANSIENT_RETRY,
    description="The current key -> value table (SPEC §7.5) as Parquet, for downstream readers.",
)
def latest_state(
    context: dg.AssetExecutionContext, log_store: LogStoreResource, pyspark: LazyPySparkResource
) -> dg.MaterializeResult:
    """Write the partition's key -> value table as Parquet, one folder per log version."""
    log = _log(context)
    handle = _existing(log_store, log)
    _config(log_store, log)  # a refused configuration fails the step in one line, as before
    return dg.MaterializeResult(metadata=latest_state_metadata(log_store, handle, lambda: pyspark.spark_session))
