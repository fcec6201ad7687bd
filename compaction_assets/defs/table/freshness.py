"""The tables' freshness in Dagster: the asset check `table_freshness` of `latest_state` (per partition: the
log's table lag, table/reading/lag.py, within its topic's `table.freshness.ms`), and the sensor that keeps the
deadline: it catches up the tables behind and runs the check for the logs past their bound.

The runs that change a log commit its table (docs/table.md, Freshness), so a table falls behind only when a
commit failed, was skipped (COMPACTION_TABLES off for a run, `--no-table`, a bulk load) or has not happened
yet. No run is due then, so neither the catch-up nor the check can wait for one: `table_freshness_sensor`
reads every log's lag from the manifests and the tables' current snapshots (no data; each topic's table
read once a tick). A log behind for half its bound gets `table_catch_up_job` (its topic's behind logs
committed in one snapshot, once per state of the logs and the table: the run key), so that the table is
caught up before the bound; a log past the bound gets `table_freshness_job`, whose check fails there, and
`check_failure_alert` pages once (defs/alerts.py). The failure says how to catch up by hand: any commit of
the log (`compaction table commit LOG`, the `rebuild_latest_state` job).

A catch-up is the one run that reads a log with no cleaning attempt: when a log's own data stops its commit
(a file that cannot be read), it marks the log uncleanable as a cleaning would, and the run that marks a
fault is the one that reports it (a cleaning that finds it marked pages nothing more, and the other way
round); the topic's other logs are committed.
"""

import warnings
from dataclasses import replace

import dagster as dg

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.defs.alerts import PARTITION_TAG
from compaction_assets.defs.batches.outcome import failure_observation
from compaction_assets.defs.batches.requests import IN_FLIGHT, in_flight
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.partitions import LOG_PARTITIONS
from compaction_assets.defs.table.table import LATEST_STATE, TABLE_FRESHNESS, TABLE_FRESHNESS_KEY, table_lag
from compaction_assets.errors import CompactionError, CorruptLogError, LogNameError
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.commit import LogCommit
from compaction_assets.table.follow import FollowResult, TopicFollow, follow_logs
from compaction_assets.table.reading.lag import TableLag, lags
from resources.log_store import LogStoreResource

# Per-partition check history needs partitioned check specs, a preview feature in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

INTERVAL_S = 30


def freshness_result(lag: TableLag) -> dg.AssetCheckResult:
    """The check's result for one log's lag."""
    if lag.late:
        how = "at least " if lag.at_least else ""
        description = (
            f"table of {lag.log} is {how}{lag.milliseconds} ms behind the log (past table.freshness.ms = "
            f"{lag.bound_ms}): it reflects version {lag.table_version} of {lag.log_version}, {lag.records} "
            f"record(s) behind; `compaction table commit {lag.log}` (or the rebuild_latest_state job) catches up"
        )
    else:
        description = f"table of {lag.log} is {lag.milliseconds} ms behind the log (bound {lag.bound_ms} ms)"
    return dg.AssetCheckResult(
        passed=not lag.late,
        severity=dg.AssetCheckSeverity.ERROR,
        description=description,
        metadata={"log": lag.log, **lag.as_document()},
    )


@dg.asset_check(
    asset=LATEST_STATE,
    name=TABLE_FRESHNESS,
    blocking=False,
    description="The topic's table reflects the partition's log within the topic's table.freshness.ms.",
)
def table_freshness(context: dg.AssetCheckExecutionContext, log_store: LogStoreResource):
    """The partition's table lag against its topic's bound, now."""
    log = context.partition_key
    try:
        parse_log_name(log, "partition key")
        lag = table_lag(log_store.handle(log, must_exist=True), log_store.config_for(log))
    except (CompactionError, LogNameError) as exc:
        raise dg.Failure(description=f"cannot read the table lag of {log}: {exc}", metadata={"log": log}) from None
    return freshness_result(lag)


table_freshness_job = dg.define_asset_job(
    "table_freshness_job",
    selection=dg.AssetSelection.checks(TABLE_FRESHNESS_KEY),
    description="Check one log's table lag against its topic's table.freshness.ms; started by table_freshness_sensor.",
)


class CatchUpConfig(dg.Config):
    """The logs of one topic whose table to bring to their versions."""

    logs: list[str]


@dg.op(description="Commit the named logs' topic table(s), one snapshot per topic (the catch-up of a table behind).")
def table_catch_up_op(context: dg.OpExecutionContext, config: CatchUpConfig, log_store: LogStoreResource) -> None:
    """Bring the tables of `config.logs` to the logs' versions; a refused commit fails the run (retried).
    A log marked uncleanable is left out (its fault was reported when it was marked); a log whose own data
    stops its commit is marked, as a cleaning would mark it, and reported once (`report_marked`)."""
    try:
        items = [LogCommit(log_store.handle(log, must_exist=True), log_store.config_for(log)) for log in config.logs]
        items = [replace(item, manifest=item.handle.manifest()) for item in items]
    except CompactionError as exc:  # a name that is no log's, or a log gone: one line, not a trace
        raise dg.Failure(description=str(exc)) from None
    marked = [item.handle.name for item in items if item.manifest is not None and item.manifest.uncleanable]
    done = follow_logs(
        [item for item in items if item.handle.name not in marked],
        now=now_ms(),
        enabled=settings.current().tables.enabled,
    )
    if done.skipped:
        raise dg.Failure(description=f"tables not caught up: {done.skipped}")
    rows = {log: r.rows_added + r.rows_deleted for log in config.logs if (r := done.result_of(log)) is not None}
    reported = report_marked(context, log_store, done)
    context.add_output_metadata(
        {"logs": ", ".join(config.logs), "rows_changed": sum(rows.values()), "left_out_marked": ", ".join(marked)}
    )
    others = [t.error for t in done.topics if t.error is not None and not _one_bad_log(t)]
    if others or reported:
        raise dg.Failure(description="; ".join(str(e) for e in others + list(reported.values()))[:1000])


def _one_bad_log(topic: TopicFollow) -> bool:
    """True when what stopped the commit is one log's own data (follow_logs commits a topic's logs one at a
    time to tell which)."""
    return isinstance(topic.error, CorruptLogError) and len(topic.logs) == 1


def report_marked(context: dg.OpExecutionContext, log_store: LogStoreResource, done: FollowResult) -> dict[str, str]:
    """Mark the logs whose own data stopped their table's commit (a file that cannot be read), and record
    each failure for the alert sensor (defs/alerts.py pages once per such record); a log another run
    marked first is left to its report. The reasons of the logs this run reports."""
    reported = {}
    for topic in done.topics:
        if not isinstance(topic.error, CorruptLogError) or not _one_bad_log(topic):
            continue
        log = topic.logs[0]
        if engine.mark_uncleanable(log_store.handle(log), topic.error) is engine.Mark.ALREADY:
            continue
        reported[log] = f"log {log} is marked uncleanable: {topic.error}"
        context.log_event(failure_observation(log, LATEST_STATE.to_user_string(), reported[log], marked=True))
    return reported


@dg.job(
    description="Commit the tables of logs behind their topic's table.freshness.ms; started by table_freshness_sensor."
)
def table_catch_up_job():
    table_catch_up_op()


def table_lags(log_store: LogStoreResource, known: set[str], now: int) -> list[TableLag]:
    """The known logs' table lags at `now` (each topic's table read once), but for the logs marked uncleanable
    or unreadable: their fault was paged once when found (a catch-up or a freshness check would fail on it
    and page it again); `clear-uncleanable` brings a log back here."""
    store, config_for = log_store.store, log_store.config_per_topic()
    current = store.current_logs()
    read = []
    for log in sorted(known & set(current)):
        manifest = current[log]
        if isinstance(manifest, CompactionError) or manifest.uncleanable:
            continue
        read.append((store.log(log), config_for(log), manifest))
    return list(lags(read, now).values())


def catch_up_requests(behind: list[TableLag]) -> list[dg.RunRequest]:
    """A catch-up run per topic of the logs behind for half their bound or more (keyed by their versions and
    the table's, so a state of the logs and table is caught up once)."""
    by_topic: dict[str, list[TableLag]] = {}
    for lag in behind:
        if lag.behind and lag.milliseconds * 2 >= lag.bound_ms:
            by_topic.setdefault(parse_log_name(lag.log)[0], []).append(lag)
    return [
        dg.RunRequest(
            job_name=table_catch_up_job.name,
            run_key="catch-up:" + ",".join(f"{lag.log}:{lag.log_version}:{lag.table_version}" for lag in lags_),
            run_config={"ops": {"table_catch_up_op": {"config": {"logs": [lag.log for lag in lags_]}}}},
            tags={"topic": topic},
        )
        for topic, lags_ in sorted(by_topic.items())
    ]


def committing(instance: dg.DagsterInstance) -> set[str]:
    """The logs a queued or running cleaning or ingestion (alone or in a batch) will commit the table of:
    a catch-up beside it races it, and fails on the same fault when the log's data is bad (which that run
    marks and pages once)."""
    runs = instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=500)
    alone = {run.tags["log"] for run in runs if run.job_name in ("compaction_job", "ingest_job") and "log" in run.tags}
    return alone | in_flight(instance, runs)


def check_requests(every: list[TableLag], most: int) -> list[dg.RunRequest]:
    """A check run for each of the `most` latest logs past their bound (the rest at the next ticks: a first
    deployment over 10,000 logs with no table yet would otherwise ask for 10,000 runs in one tick)."""
    late = sorted((lag for lag in every if lag.late), key=lambda lag: (-lag.milliseconds, lag.log))
    return [
        # the partition as a tag: a job of checks only has no partitions definition of its own (Dagster
        # infers it from selected assets), so a run request's partition_key is refused for it
        dg.RunRequest(
            job_name=table_freshness_job.name,
            run_key=f"{TABLE_FRESHNESS}:{lag.log}:{lag.log_version}:{lag.table_version}",
            tags={PARTITION_TAG: lag.log, "log": lag.log},
        )
        for lag in late[:most]
    ]


@dg.sensor(
    jobs=[table_freshness_job, table_catch_up_job],
    minimum_interval_seconds=INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def table_freshness_sensor(context: dg.SensorEvaluationContext, log_store: LogStoreResource) -> dg.SensorResult:
    """Catch up the tables behind for half their bound, and check those past it (once per state of the log
    and its table)."""
    if not settings.current().tables.enabled:
        return dg.SensorResult(skip_reason=dg.SkipReason("tables are off (COMPACTION_TABLES)"))
    known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
    busy = committing(context.instance)
    every = [lag for lag in table_lags(log_store, known, now_ms()) if lag.log not in busy]
    runs = catch_up_requests(every) + check_requests(every, settings.current().max_runs_per_tick)
    return dg.SensorResult(
        run_requests=runs,
        skip_reason=None if runs else dg.SkipReason(f"{len(known)} log(s): every table within its bound"),
    )
