"""Jobs: the ones sensors and schedules start (ingestion, cleaning, retention, garbage collection) and
the operator's (clear-uncleanable, set-checkpoint, set-log-start, gc, rebuild the latest state), each
launchable from the UI with typed config. The operator jobs call the very functions the CLI calls
(`engine.clear_uncleanable`, `writer.set_checkpoint`, `writer.set_log_start`, `handle.collect_garbage`
under the cleaning lease, `engine.apply_retention`). A refusal is one line and is never retried.
"""

import dagster as dg

from compaction_assets.cleaning import engine
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.partitions import LOG_PARTITIONS
from compaction_assets.defs.table.table import TABLE_FRESHNESS_KEY, follow_tables
from compaction_assets.errors import CompactionError, LockedError
from compaction_assets.log import writer
from resources.log_store import LogStoreResource

# Spark-using steps share this Dagster pool; its limit is the instance's (dagster.yaml, see docs/dagster.md,
# "Concurrency and retries"):
# 200 due logs queue behind it instead of starting 200 JVMs.
SPARK_POOL = "spark"
DEFAULT_SPARK_POOL_LIMIT = 2
# Transient faults (a lease held by a cleaning that is finishing, a storage hiccup) are retried with
# backoff; refusals and corrupt logs raise dg.Failure(allow_retries=False) and are not.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets("raw_segments"),
    description="Ingest a log's new landing files (each at most once); started by log_discovery_sensor.",
)
compaction_job = dg.define_asset_job(
    "compaction_job",
    description="Plan, clean (with the four checks) and write the latest state of one log; started by "
    "dirty_ratio_sensor, max_compaction_lag_sensor and compaction_sweep_schedule.",
    selection=(
        dg.AssetSelection.assets("cleanable_range", "compacted_log", "latest_state")
        | dg.AssetSelection.checks_for_assets("compacted_log")
    )
    - dg.AssetSelection.checks(TABLE_FRESHNESS_KEY),
)
rebuild_latest_state_job = dg.define_asset_job(
    "rebuild_latest_state",
    selection=dg.AssetSelection.assets("latest_state") - dg.AssetSelection.checks(TABLE_FRESHNESS_KEY),
    description="Rewrite a log's key -> value table from its current version (the CLI's latest-state).",
)


def refuse(message: str) -> dg.Failure:
    """A one-line refusal that is not retried."""
    return dg.Failure(description=message, allow_retries=False)


def _handle(log_store: LogStoreResource, log: str):
    try:
        return log_store.handle(log, must_exist=True)
    except CompactionError as exc:
        raise refuse(str(exc)) from None


class LogConfig(dg.Config):
    """An operator action on one log."""

    log: str  # <topic>-<partition>


class CheckpointConfig(dg.Config):
    """Overwrite a log's cleaner checkpoint (SPEC §3)."""

    log: str
    offset: int


class LogStartConfig(dg.Config):
    """Move a log's start offset forward (SPEC §1): the records below it are deleted for good."""

    log: str
    offset: int
    confirm: str = ""  # must repeat the log's name: this move deletes records


class LogsConfig(dg.Config):
    """Logs to act on; empty means every log of the store."""

    # pydantic copies a field's default for each instance; a default_factory would leave Dagster's config
    # schema without the default the launchpad shows
    logs: list[str] = []  # noqa: RUF012
    grace_seconds: float | None = None  # gc only: files younger than this stay (default: the store's)
    now_ms: int | None = None  # retention only: evaluate at this time instead of the clock


@dg.op(description="Clear the uncleanable mark of a log after a repair (CLI: clear-uncleanable).")
def clear_uncleanable_op(context: dg.OpExecutionContext, config: LogConfig, log_store: LogStoreResource) -> None:
    """Clear a log's uncleanable mark."""
    handle = _handle(log_store, config.log)
    before = handle.manifest().uncleanable
    try:
        engine.clear_uncleanable(handle)
    except CompactionError as exc:
        raise refuse(str(exc)) from None
    context.add_output_metadata(
        {"log": config.log, "was_uncleanable": bool(before), "error_cleared": before.error if before else ""}
    )


@dg.op(
    description="Clear the uncleanable mark of the named logs, or of every marked log when none is named "
    "(CLI: clear-uncleanable --all)."
)
def clear_uncleanable_logs_op(context: dg.OpExecutionContext, config: LogsConfig, log_store: LogStoreResource) -> None:
    """Clear the uncleanable marks of several logs (e.g. after an engine fault marked them, or a repair)."""
    names = list(config.logs) or [log for log in log_store.store.logs() if log_store.handle(log).manifest().uncleanable]
    cleared, failed = {}, []
    for log in names:
        handle = _handle(log_store, log)
        before = handle.manifest().uncleanable
        try:
            engine.clear_uncleanable(handle)
        except CompactionError as exc:
            failed.append(f"{log}: {exc}")
            continue
        if before:
            cleared[log] = before.error
            context.log.info(f"{log}: mark cleared ({cleared[log]})")
    context.add_output_metadata(
        {
            "logs_cleared": len(cleared),
            "cleared": dg.MetadataValue.json(cleared),
            "failed": dg.MetadataValue.json(failed),
        }
    )
    if failed:
        raise refuse(f"{len(failed)} log(s) could not be cleared: {'; '.join(failed)[:500]}")


@dg.op(description="Overwrite a log's cleaner checkpoint (CLI: set-checkpoint).")
def set_checkpoint_op(context: dg.OpExecutionContext, config: CheckpointConfig, log_store: LogStoreResource) -> None:
    """Overwrite a log's cleaner checkpoint."""
    handle = _handle(log_store, config.log)
    try:
        m = writer.set_checkpoint(handle, config.offset)
    except CompactionError as exc:
        raise refuse(str(exc)) from None
    context.add_output_metadata({"log": config.log, "checkpoint": m.checkpoint, "version": m.version})


@dg.op(
    description="Move a log's start offset forward, deleting the records below it (CLI: set-log-start). "
    "`confirm` must repeat the log's name."
)
def set_log_start_op(context: dg.OpExecutionContext, config: LogStartConfig, log_store: LogStoreResource) -> None:
    """Move a log's start offset forward once the operator confirmed it."""
    if config.confirm != config.log:
        raise refuse(
            f"set-log-start of {config.log!r} to {config.offset} deletes every record below it: "
            f"set confirm to {config.log!r} to do it"
        )
    handle = _handle(log_store, config.log)
    try:
        m = writer.set_log_start(handle, config.offset)
    except CompactionError as exc:
        raise refuse(str(exc)) from None
    follow_tables(log_store, [config.log], now_ms(), context.log.warning)  # the deleted records leave the table
    context.add_output_metadata({"log": config.log, "log_start_offset": m.log_start_offset, "version": m.version})


def _targets(log_store: LogStoreResource, logs: list[str]) -> list[str]:
    return list(logs) if logs else log_store.store.logs()


@dg.op(description="Remove files left by interrupted changes (CLI: gc), under each log's cleaning lease.")
def gc_op(context: dg.OpExecutionContext, config: LogsConfig, log_store: LogStoreResource) -> None:
    """Collect garbage in the named logs (or all); a log being cleaned is skipped (its cleaning collects)."""
    removed, skipped, failed = {}, [], []
    for log in _targets(log_store, config.logs):
        handle = _handle(log_store, log)
        try:
            with handle.lock("clean", purpose="garbage collection"):
                removed[log] = len(handle.collect_garbage(config.grace_seconds))
        except LockedError as exc:
            skipped.append(log)
            context.log.info(f"{log}: skipped, {exc}")
        except CompactionError as exc:
            failed.append(f"{log}: {exc}")
    context.add_output_metadata(
        {
            "logs": len(removed),
            "removed_files": sum(removed.values()),
            "skipped_locked": skipped,
            "per_log": dg.MetadataValue.json(removed),
        }
    )
    if failed:
        raise dg.Failure(description=f"gc failed for {len(failed)} log(s): " + "; ".join(failed)[:1000])


def delete_policy_logs(log_store: LogStoreResource, logs: list[str] | None = None) -> list[str]:
    """The logs (named, or all of the store) whose cleanup.policy includes delete."""
    config_for = log_store.config_per_topic()
    return [log for log in _targets(log_store, logs or []) if config_for(log).delete]


@dg.op(description="SPEC §6 retention (retention.ms, retention.bytes) for every log whose policy includes delete.")
def retention_op(context: dg.OpExecutionContext, config: LogsConfig, log_store: LogStoreResource):
    """Apply retention to the named delete-policy logs (or all), each under its cleaning lease."""
    now = config.now_ms if config.now_ms is not None else now_ms()
    total = {"logs": 0, "segments": 0, "records": 0, "bytes": 0}
    skipped, failed, changed = [], [], []
    known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
    try:
        logs = delete_policy_logs(log_store, config.logs)
    except CompactionError as exc:  # a name that is no log's (a topic's configuration is read by its name)
        raise refuse(str(exc)) from None
    for log in logs:
        handle = _handle(log_store, log)
        try:
            with handle.lock("clean", purpose=f"retention at {now}"):
                removed = engine.apply_retention(handle, log_store.config_for(log), now)
        except LockedError:
            skipped.append(log)  # the cleaning holding the lease applies retention itself
            continue
        except CompactionError as exc:
            failed.append(f"{log}: {exc}")
            continue
        if not removed:
            continue
        changed.append(log)
        total["logs"] += 1
        for key in ("segments", "records", "bytes"):
            total[key] += getattr(removed, key)
        context.log.info(
            f"{log}: retention removed {removed.records} record(s) in {removed.segments} "
            f"segment(s), log start now {removed.log_start_offset}"
        )
        if log in known:
            # `observed_*`, as the sensor's: apart from the keys of compacted_log's materializations
            yield dg.AssetObservation(
                asset_key="compacted_log",
                partition=log,
                metadata={
                    "observed_retention_removed_segments": removed.segments,
                    "observed_retention_removed_records": removed.records,
                    "observed_retention_removed_bytes": removed.bytes,
                    "observed_log_start_offset": removed.log_start_offset,
                    "observed_at_ms": now,
                },
            )
    follow_tables(log_store, changed, now, context.log.warning)  # the removed records leave the tables too
    context.add_output_metadata({**{f"retention_{k}": v for k, v in total.items()}, "skipped_locked": skipped})
    if failed:
        raise dg.Failure(description=f"retention failed for {len(failed)} log(s): " + "; ".join(failed)[:1000])
    yield dg.Output(None)


@dg.job(description="Clear the uncleanable mark of one log after a repair.")
def clear_uncleanable_job():
    clear_uncleanable_op()


@dg.job(description="Clear the uncleanable marks of several logs (no logs named: every marked log).")
def clear_uncleanable_logs_job():
    clear_uncleanable_logs_op()


@dg.job(description="Overwrite one log's cleaner checkpoint.")
def set_checkpoint_job():
    set_checkpoint_op()


@dg.job(description="Move one log's start offset forward (destructive: confirm with the log's name).")
def set_log_start_job():
    set_log_start_op()


@dg.job(description="Collect files left by interrupted changes, in the named logs or all.")
def gc_job():
    gc_op()


@dg.job(description="Apply retention to every log whose cleanup.policy includes delete.")
def retention_job():
    retention_op()


# a tuple, so that each job keeps its own type (Dagster exports no name for an asset job's type)
OPERATOR_JOBS = (
    clear_uncleanable_job,
    clear_uncleanable_logs_job,
    set_checkpoint_job,
    set_log_start_job,
    gc_job,
    rebuild_latest_state_job,
)
