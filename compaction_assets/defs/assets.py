"""The partitioned assets: raw segments (ingestion), the cleanable range (plan), the compacted log
(the cleaning; its checks are in defs/checks.py) and the latest state. Every decision is the engine's."""


import warnings

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from compaction_assets.checks.specs import AFTER_VERSION, BEFORE_VERSION, CHECKS_PIN, EVALUATED_AT_MS
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.figures import CleaningStats
from compaction_assets.cleaning.latest_state import write_latest_state
from compaction_assets.defs.jobs import SPARK_POOL, TRANSIENT_RETRY, refuse
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.errors import CompactionError, CorruptLogError, EngineError, LockedError, LogNameError
from compaction_assets.log.fs import Storage
from compaction_assets.log.landing import ingest, landing_logs
from compaction_assets.log.names import parse_log_name
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.table import commit_table
from resources.log_store import LogStoreResource

# Per-partition check history needs partitioned check specs, a preview feature in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


class CleaningConfig(dg.Config):
    force: bool = False        # clean even when the log is not eligible (SPEC §5)
    now_ms: int | None = None  # evaluate at this time instead of the clock (replays, tests)
    dry_run_detail: bool = False  # cleanable_range: key-level dry run (a Spark job) instead of metadata only


def _config(log_store: LogStoreResource, log: str):
    """The log's stored configuration; a refusal (a disagreeing topics file) fails the step in one line,
    and is not retried (the same file disagrees the same way on every try)."""
    try:
        return log_store.config_for(log)
    except CompactionError as exc:
        raise dg.Failure(description=str(exc), metadata={"log": log}, allow_retries=False) from None


def _config_metadata(log_store: LogStoreResource, log: str) -> dict:
    """The configuration the step used: the Kafka keys, their stored version and who set them."""
    src = log_store.config_source(log)
    return {"config": dg.MetadataValue.json(src["config"]), "config_version": src["config_version"],
            "config_source": src["config_source"], "config_changed_by": src["config_changed_by"] or "built-in"}


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
        raise refuse(f"log {log!r} does not exist in the store at {log_store.store_location()} "
                     f"(nothing landed for it yet, or it was removed)")
    return handle


def _failure(exc: CompactionError, log: str) -> dg.Failure:
    """A step failure: retried when transient (another holder of the log's lease, an engine fault such as
    a Spark Connect server that is down), else one line, final."""
    return dg.Failure(description=str(exc), metadata={"log": log},
                      allow_retries=isinstance(exc, (LockedError, EngineError)))


@dg.asset(partitions_def=log_partitions, group_name="compaction", kinds={"parquet"}, retry_policy=TRANSIENT_RETRY,
          description="Ingests new files from <landing>/<topic>/partition=<p>/ into the log, each file at most once.")
def raw_segments(context: dg.AssetExecutionContext, log_store: LogStoreResource) -> dg.MaterializeResult:
    """Ingest the partition's new landing files into its log."""
    log = _log(context)
    handle, cfg = log_store.handle(log), _config(log_store, log)
    folder = landing_logs(log_store.landing_area())[0].get(log)
    if folder is None and not log_store.handle(log).exists():
        raise refuse(f"log {log!r} does not exist in the store at {log_store.store_location()} and has no "
                     f"landing folder under {log_store.landing_area()}")
    report = {"files_ingested": 0, "records_appended": 0, "invalid_records_dropped": 0, "files": []}
    if folder is not None:
        try:
            report = ingest(handle, cfg, folder, progress=context.log.info)
        except CompactionError as exc:
            raise dg.Failure(description=f"ingestion of {log} stopped: {exc}",
                             metadata={"log": log, "reason": str(exc)},
                             allow_retries=isinstance(exc, LockedError)) from None
    m = handle.manifest()
    return dg.MaterializeResult(metadata={
        "files_ingested": report["files_ingested"], "records_appended": report["records_appended"],
        "invalid_records_dropped": report["invalid_records_dropped"], "log_end_offset": m.log_end_offset,
        "records": m.total_records, "size_bytes": m.total_size, "segments": len(m.segments),
        "files": dg.MetadataValue.json(report["files"][-50:])})


@dg.asset(partitions_def=log_partitions, group_name="compaction", kinds={"spark"}, deps=[raw_segments],
          pool=SPARK_POOL, retry_policy=TRANSIENT_RETRY, description="The plan (SPEC §3-§5) and a dry run: what a cleaning would remove and why.")
def cleanable_range(context: dg.AssetExecutionContext, config: CleaningConfig, log_store: LogStoreResource,
                    pyspark: LazyPySparkResource) -> dg.MaterializeResult:
    """Plan the partition's cleaning and dry-run it: what would go and why."""
    log = _log(context)
    now = config.now_ms if config.now_ms is not None else now_ms()
    handle = _existing(log_store, log)
    try:
        dry = engine.dry_run(handle, _config(log_store, log), now, spark=lambda: pyspark.spark_session,
                             force=config.force, detail=config.dry_run_detail)
    except CorruptLogError as exc:  # this job is a cleaning attempt: a log it cannot read is uncleanable
        engine.mark_uncleanable(handle, exc)
        raise dg.Failure(description=f"log {log} is marked uncleanable: {exc}", metadata={"log": log},
                         allow_retries=False) from None
    except CompactionError as exc:
        raise _failure(exc, log) from None
    ev = dry.evaluation
    metadata = {
        "first_dirty_offset": ev.first_dirty_offset, "first_uncleanable_offset": ev.first_uncleanable_offset,
        "dirty_ratio": float(ev.dirty_ratio), "max_compaction_delay_ms": ev.max_compaction_delay_ms,
        "eligible": ev.eligible, "reason": str(dry.reason or "none"),
        "would_remove_by_retention_records": dry.retention.records,
        "segments_in_range": dry.segments_in_range, "evaluated_at_ms": now}
    if dry.detail:  # key-level figures only when asked for (dry_run_detail): they cost a Spark job
        metadata.update({
            "would_remove_superseded_records": dry.superseded.records,
            "would_remove_superseded_bytes": dry.superseded.bytes,
            "would_remove_expired_tombstones": dry.tombstones_expired.records,
            "segments_to_rewrite": dry.segments_to_rewrite, "segments_to_mark": dry.segments_to_mark})
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(partitions_def=log_partitions, group_name="compaction", kinds={"spark"}, deps=[cleanable_range],
          pool=SPARK_POOL, retry_policy=TRANSIENT_RETRY,
          description="Cleans the log (SPEC §6) when eligible or forced, then applies retention; its four checks "
                      "(defs/checks.py) verify the cleaning it records.")
def compacted_log(context: dg.AssetExecutionContext, config: CleaningConfig, log_store: LogStoreResource,
                  pyspark: LazyPySparkResource) -> dg.MaterializeResult:
    """Clean the partition's log when due (or forced), apply retention, and record what the checks verify."""
    log = _log(context)
    handle, cfg = _existing(log_store, log), _config(log_store, log)
    now = config.now_ms if config.now_ms is not None else now_ms()
    try:
        rep = engine.run(handle, cfg, now, spark=lambda: pyspark.spark_session, force=config.force,
                         progress=context.log.info)
    except CompactionError as exc:
        raise _failure(exc, log) from None
    if handle.exists():  # the checks re-read these versions, from this run or re-run from the UI later
        handle.pin_versions(CHECKS_PIN, (rep.before_version, rep.after_version))
    ev, s = rep.evaluation, rep.stats or CleaningStats()
    return dg.MaterializeResult(metadata={
        "cleaned": rep.cleaned, "reason": str(rep.reason or "none"),
        "first_dirty_offset": ev.first_dirty_offset, "first_uncleanable_offset": ev.first_uncleanable_offset,
        "dirty_ratio": float(ev.dirty_ratio), "max_compaction_delay_ms": ev.max_compaction_delay_ms,
        "records_read": s.records_read, "records_written": s.records_written,
        "records_superseded": s.records_superseded, "tombstones_stamped": s.tombstones_stamped,
        "tombstones_removed": s.tombstones_removed, "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written, "cleaner_recopy_percent": float(s.cleaner_recopy_percent),
        "clean_time_secs": float(s.clean_time_secs), "checkpoint": rep.checkpoint,
        "retention_removed_records": rep.retention.records if rep.retention else 0,
        **_config_metadata(log_store, log),
        # what the checks verify: the versions the cleaning read and wrote, and its time
        BEFORE_VERSION: rep.before_version, AFTER_VERSION: rep.after_version, EVALUATED_AT_MS: now})


@dg.asset(partitions_def=log_partitions, group_name="compaction", kinds={"spark", "parquet"}, deps=[compacted_log],
          pool=SPARK_POOL, retry_policy=TRANSIENT_RETRY,
          description="The current key -> value table (SPEC §7.5) as Parquet, for downstream readers.")
def latest_state(context: dg.AssetExecutionContext, log_store: LogStoreResource,
                 pyspark: LazyPySparkResource) -> dg.MaterializeResult:
    """Write the partition's key -> value table as Parquet, one folder per log version."""
    log = _log(context)
    handle, cfg = _existing(log_store, log), _config(log_store, log)
    m = handle.manifest()
    # A local path or a URI (s3://, gs://, hdfs://...): on a cluster it must be one the executors see.
    st = Storage.open(log_store.latest_state_location())
    folder = st.join(log)
    target = st.join(log, f"version={m.version}")
    # a small log is written with Arrow here: no Spark session starts for it
    keys = write_latest_state(handle, cfg, st, target, lambda: pyspark.spark_session, m)
    for old in st.list_dir(folder):  # keep this version and the one before (readers in flight)
        if old.startswith("version=") and old != f"version={m.version}" and \
                int(old.split("=")[1]) < m.version - 1:
            st.delete(st.join(log, old))
    table = commit_table(handle, cfg, m)   # the topic's Iceberg table too (defs/table.py)
    return dg.MaterializeResult(metadata={"keys": keys, "path": dg.MetadataValue.path(
        target if st.local else f"{st.scheme}://{target}"), "log_version": m.version, **table})
