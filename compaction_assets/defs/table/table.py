"""The Dagster side of the topics' tables: the `latest_state` asset commits its log's change to its topic's
table (`commit_table`, its materialization metadata); `compare_table` sets the table beside the checks'
own model of the latest state of the log version it reflects (the asset check that does: defs/checks.py).

Why the existing asset and not a table asset per topic: the asset's partitions are logs, and a topic's
table is committed one log at a time (one snapshot per cleaning, exactly once with it), so the partition
that built the latest state is the one that commits it, in the same run, with no second partition scheme
over topics to keep in step with the logs.
"""

from dataclasses import dataclass

import dagster as dg

from compaction_assets import settings
from compaction_assets.checks.latest import compare, model_latest_state
from compaction_assets.defs import clock
from compaction_assets.errors import CompactionError, transient
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.commit import CommitResult, LogCommit, commit_log, marks_of
from compaction_assets.table.follow import follow_logs
from compaction_assets.table.reading.lag import TableLag, lag_of, topic_snapshot
from compaction_assets.table.reading.read import open_table, scan
from compaction_assets.table.summary import LogMark
from compaction_assets.topics.config import TopicConfig
from resources.log_store import LogStoreResource

LATEST_STATE = dg.AssetKey("latest_state")
TABLE_CHECK = "table_matches_latest_state"
# run by table_freshness_sensor's runs only (defs/table/freshness.py): right after a commit it would say nothing
TABLE_FRESHNESS = "table_freshness"
TABLE_FRESHNESS_KEY = dg.AssetCheckKey(LATEST_STATE, TABLE_FRESHNESS)
# A batch's table checks read their topic's table for this many rows at most at a time: the rows of a
# group are held as Python objects until its checks are done (a log's check alone holds its own).
ROWS_PER_READ = 1_000_000


def commit_table(handle, config, manifest, now_ms: int | None = None, state=None) -> dict:
    """Commit the log's latest state (`state`, when built already) to its topic's table; the
    materialization metadata (none when off)."""
    if not settings.current().tables.enabled:
        return {}
    try:
        r = commit_log(handle, config, manifest=manifest, now=now_ms, state=state)
    except CompactionError as exc:
        raise table_failure(handle.name, exc) from None
    return {**table_metadata(r), **lag_metadata(handle, config)}


def table_lag(handle: LogHandle, config: TopicConfig, marks: dict[str, LogMark] | None = None) -> TableLag:
    """The log's table lag now (the clock's time); `marks`: its topic's current snapshot's, when read already."""
    if marks is None:
        marks = topic_snapshot(handle.st, parse_log_name(handle.name)[0], config.table_name).marks
    return lag_of(handle, handle.manifest(), marks.get(handle.name), config.table_freshness_ms, clock.now_ms())


def lag_metadata(handle: LogHandle, config: TopicConfig, marks: dict[str, LogMark] | None = None) -> dict:
    """The log's table lag as an asset's metadata (after its commit: 0 unless the log changed since)."""
    try:
        lag = table_lag(handle, config, marks)
    except CompactionError as exc:  # the commit's figures still stand; the lag says why it has none
        return {"table_lag_error": str(exc)}
    return {"table_lag_records": lag.records, "table_lag_ms": lag.milliseconds, "table_freshness_ms": lag.bound_ms}


def follow_tables(log_store: LogStoreResource, logs: list[str], now: int | None, warn) -> None:
    """After an ingestion: bring the logs' tables to their versions, one snapshot per topic (nothing when
    tables are off). A refused commit does not fail the ingestion, which is committed: `warn` says so, and
    the log's next commit catches up (its lag shows it, and `table_freshness` fails past the bound)."""
    items = [LogCommit(log_store.handle(log), log_store.config_for(log)) for log in logs]
    done = follow_logs(items, now=now, enabled=settings.current().tables.enabled)
    for topic in done.topics:
        if topic.error is not None:
            warn(f"table of {', '.join(topic.logs)} not committed: {topic.error}; the next commit catches up")


def table_refusal(log: str, exc: CompactionError) -> str:
    """The one line that reports a refused table commit of `log` (its step's failure, a batch's log's)."""
    return f"table commit of {log}: {exc}"


def table_failure(log: str, exc: CompactionError) -> dg.Failure:
    """A refused table commit, as the latest_state step fails on it (not retried: the table's own fault,
    unless its store did not answer)."""
    return dg.Failure(description=table_refusal(log, exc), metadata={"log": log}, allow_retries=transient(exc))


def table_metadata(r: CommitResult) -> dict:
    """latest_state's metadata of a log's table commit (a batch's, table/commit/group.py, or its own)."""
    expiry = r.expiry
    return {
        "table": r.identifier,
        "table_snapshot_id": str(r.snapshot_id),
        "table_committed": r.committed,
        "table_rows_added": r.rows_added,
        "table_rows_deleted": r.rows_deleted,
        "table_rows_masked": r.rows_masked,
        "table_files_added": r.files_added,
        "table_delete_files_added": r.delete_files_added,
        "table_files_removed": r.files_removed,
        "table_log_versions": dg.MetadataValue.json(r.log_versions),
        "table_snapshots_expired": expiry.snapshots_expired if expiry else 0,
        # which way the commit found the log's change (tail, in-process or spark: table/commit/route.py) and why
        "table_commit_path": r.path,
        "table_commit_why": r.why,
    }


@dataclass(frozen=True)
class TopicRows:
    """One read of a topic's table for a batch's table checks: its current snapshot's logs and the rows of
    the batch's partitions (one scan a topic, not one a log: each scan plans over the topic's every file)."""

    ident: str
    marks: dict
    rows: dict[int, list[dict]]


def read_topic(log_store: LogStoreResource, log: str, topic: str, partitions: list[int]) -> TopicRows:
    """The topic's current snapshot (the store's of `log`, one of its logs), for `partitions`: its marks and
    each partition's rows."""
    table, ident = open_table(log_store.handle(log).st, topic)
    snapshot = table.current_snapshot()
    rows: dict[int, list[dict]] = {p: [] for p in partitions}
    if snapshot is not None:
        for row in (
            scan(table, snapshot.snapshot_id, partitions=partitions)
            .select(["partition", "key", "value", "offset", "timestamp"])
            .to_pylist()
        ):
            rows[row.pop("partition")].append(row)
    return TopicRows(ident, marks_of(snapshot), rows)


def read_topics(log_store: LogStoreResource, keys: dict[str, int], max_rows: int = ROWS_PER_READ):
    """The logs of `keys` (log -> its latest state's keys) in groups of one topic and at most `max_rows` rows
    (a log with more has a group of its own), each with its topic's table read once for the group; None for
    a topic that cannot be read (each log's check reads it again and reports the error on its partition)."""
    groups: dict[str, list[list[str]]] = {}
    rows: dict[str, int] = {}
    for log, count in keys.items():
        topic = parse_log_name(log, "partition key")[0]
        group = groups.setdefault(topic, [[]])
        if group[-1] and rows[topic] + count > max_rows:
            group.append([])
            rows[topic] = 0
        group[-1].append(log)
        rows[topic] = rows.get(topic, 0) + count
    for topic, cut in groups.items():
        for logs in cut:
            try:
                read = read_topic(log_store, logs[0], topic, [parse_log_name(log, "log")[1] for log in logs])
            except CompactionError:
                read = None
            yield logs, read


def compare_table(log_store: LogStoreResource, log: str, view=None, topic_rows: TopicRows | None = None):
    """The partition's rows of its topic's table against the model; (comparison, table, log version).
    `view`: a version of the log the checks read already (used when it is the one the table reflects);
    `topic_rows`: the table as a batch read it once for its partitions (else read here)."""
    topic, partition = parse_log_name(log, "partition key")
    handle = log_store.handle(log)
    if topic_rows is None or partition not in topic_rows.rows:
        topic_rows = read_topic(log_store, log, topic, [partition])
    mark = topic_rows.marks.get(log)
    if mark is None:
        raise CompactionError(f"table {topic_rows.ident} reflects no version of {log} yet")
    expected = model_latest_state(handle, log_store.config_for(log), handle.manifest_version(mark.version), view)
    return compare(topic_rows.rows[partition], expected), topic_rows.ident, mark.version
