"""The Dagster side of the topics' tables: the `latest_state` asset commits its log's change to its topic's
table (`commit_table`, its materialization metadata), and an asset check compares the table with the
checks' own model of the latest state of the log version it reflects.

Why the existing asset and not a table asset per topic: the asset's partitions are logs, and a topic's
table is committed one log at a time (one snapshot per cleaning, exactly once with it), so the partition
that built the latest state is the one that commits it, in the same run, with no second partition scheme
over topics to keep in step with the logs.
"""

import warnings

import dagster as dg

from compaction_assets import settings
from compaction_assets.checks.latest import compare, model_latest_state
from compaction_assets.errors import CompactionError
from compaction_assets.log.names import parse_log_name
from compaction_assets.table.commit import CommitResult, commit_log, marks_of
from compaction_assets.table.read import open_table, scan
from compaction_assets.defs.partitions import log_partitions
from resources.log_store import LogStoreResource

warnings.filterwarnings("ignore", category=dg.PreviewWarning)

LATEST_STATE = dg.AssetKey("latest_state")
TABLE_CHECK = "table_matches_latest_state"


def commit_table(handle, config, manifest, now_ms: int | None = None, state=None) -> dict:
    """Commit the log's latest state (`state`, when built already) to its topic's table; the
    materialization metadata (none when off)."""
    if not settings.current().tables.enabled:
        return {}
    try:
        r = commit_log(handle, config, manifest=manifest, now=now_ms, state=state)
    except CompactionError as exc:
        raise table_failure(handle.name, exc) from None
    return table_metadata(r)


def table_failure(log: str, exc: CompactionError) -> dg.Failure:
    """A refused table commit, as the latest_state step fails on it (not retried: the table's own fault)."""
    return dg.Failure(description=f"table commit of {log}: {exc}", metadata={"log": log}, allow_retries=False)


def table_metadata(r: CommitResult) -> dict:
    """latest_state's metadata of a log's table commit (a batch's, table/group.py, or its own)."""
    expiry = r.expiry
    return {"table": r.identifier, "table_snapshot_id": str(r.snapshot_id), "table_committed": r.committed,
            "table_rows_added": r.rows_added, "table_rows_deleted": r.rows_deleted,
            "table_files_added": r.files_added, "table_delete_files_added": r.delete_files_added,
            "table_files_removed": r.files_removed,
            "table_log_versions": dg.MetadataValue.json(r.log_versions),
            "table_snapshots_expired": expiry.snapshots_expired if expiry else 0}


def compare_table(log_store: LogStoreResource, log: str, view=None):
    """The partition's rows of its topic's table against the model; (comparison, table, log version).
    `view`: a version of the log the checks read already (used when it is the one the table reflects)."""
    topic, partition = parse_log_name(log, "partition key")
    handle = log_store.handle(log)
    table, ident = open_table(handle.st, topic)
    mark = marks_of(table.current_snapshot()).get(log)
    if mark is None:
        raise CompactionError(f"table {ident} reflects no version of {log} yet")
    expected = model_latest_state(handle, log_store.config_for(log), handle.manifest_version(mark.version), view)
    rows = scan(table, table.current_snapshot().snapshot_id, partition).select(
        ["key", "value", "offset", "timestamp"]).to_pylist()
    return compare(rows, expected), ident, mark.version


@dg.asset_check(asset=LATEST_STATE, name=TABLE_CHECK, blocking=True, partitions_def=log_partitions,
                description="The topic's table holds, for this partition, exactly the checks' own model of the "
                            "latest state of the log version its current snapshot reflects.")
def table_matches_latest_state(context: dg.AssetCheckExecutionContext, log_store: LogStoreResource):
    """Compare the partition's rows of its topic's table with the model's latest state of that version."""
    from compaction_assets.defs.history import table_check_record   # history imports this module

    log = context.partition_key
    try:
        record = table_check_record(log_store, log)
    except CompactionError as exc:
        raise dg.Failure(description=f"cannot compare the table of {log}: {exc}", metadata={"log": log}) from None
    return record.result()
