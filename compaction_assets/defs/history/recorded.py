"""What a partition's history already holds, read back: the cleaning its last compacted_log materialization
recorded (what the checks verify), and, for a batch's retry or re-execution, what a killed run recorded of
each partition in Dagster's indexes and a cleaning it committed in the store but never recorded
(defs/batches/cleaning.py records the rest, so nothing is lost and nothing is doubled)."""

from collections.abc import Iterator
from typing import cast

import dagster as dg

from compaction_assets.checks.specs import AFTER_VERSION, BEFORE_VERSION, CHECK_SPECS, EVALUATED_AT_MS
from compaction_assets.cleaning.decide.decision import CleaningStats
from compaction_assets.cleaning.engine import StepReport
from compaction_assets.defs.history.history import COMPACTED_LOG, Cleaning
from compaction_assets.defs.table.table import LATEST_STATE, TABLE_CHECK
from compaction_assets.planning.planner import evaluate

RECORDS_PAGE = 1000  # records read at a time from Dagster's indexes


def recorded_cleaning(instance: dg.DagsterInstance, log: str) -> Cleaning | None:
    """The partition's latest compacted_log materialization's record of its cleaning, or None."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=COMPACTED_LOG, asset_partitions=[log]), limit=1
    ).records
    event = records[0].asset_materialization if records else None
    meta = event.metadata if event is not None else {}
    if not all(k in meta for k in (BEFORE_VERSION, AFTER_VERSION, EVALUATED_AT_MS, "cleaned")):
        return None
    return Cleaning(
        before=_integer(meta[BEFORE_VERSION]),
        after=_integer(meta[AFTER_VERSION]),
        now=_integer(meta[EVALUATED_AT_MS]),
        cleaned=bool(meta["cleaned"].value),
        run=records[0].run_id,
    )


def _integer(entry: dg.MetadataValue) -> int:
    """A metadata entry recorded as an integer (Dagster types an entry's value as any value it can store)."""
    return int(cast(int, entry.value))


def event_name(event) -> str | None:
    """What a batch's event records for its partition: an asset's key, or an asset's key and check name."""
    if isinstance(event, dg.AssetMaterialization):
        return event.asset_key.to_user_string()
    if isinstance(event, dg.AssetCheckEvaluation):
        return f"{event.asset_key.to_user_string()}:{event.check_name}"
    return None


def recorded_per_partition(instance: dg.DagsterInstance, run_id: str) -> dict[str, set[str]]:
    """Per partition, the `event_name`s a run recorded, as Dagster's indexes hold them (the UI's and the
    checks' view): a run killed between writing an event to its own log and to the index recorded it not.
    Read back to the run's creation, page by page, whatever other runs recorded since."""
    out: dict[str, set[str]] = {}
    run = instance.get_run_record_by_id(run_id)
    since = run.create_timestamp.timestamp() if run is not None else 0.0  # a deleted run: read every page
    for key in (dg.AssetKey("cleanable_range"), COMPACTED_LOG, LATEST_STATE):
        for partition in _materialized_partitions(instance, run_id, key, since):
            out.setdefault(partition, set()).add(key.to_user_string())
    for asset_key, name in [(COMPACTED_LOG, spec.name) for spec in CHECK_SPECS] + [(LATEST_STATE, TABLE_CHECK)]:
        for partition in _checked_partitions(instance, run_id, dg.AssetCheckKey(asset_key, name), since):
            out.setdefault(partition, set()).add(f"{asset_key.to_user_string()}:{name}")
    return out


def _materialized_partitions(
    instance: dg.DagsterInstance, run_id: str, key: dg.AssetKey, since: float
) -> Iterator[str]:
    """The partitions of `key` the run materialized, from the materializations recorded since `since`."""
    records_filter, cursor = dg.AssetRecordsFilter(asset_key=key, after_timestamp=since), None
    while True:
        page = instance.fetch_materializations(records_filter, limit=RECORDS_PAGE, cursor=cursor)
        for rec in page.records:
            event = rec.asset_materialization
            if rec.run_id == run_id and event is not None and event.partition is not None:
                yield event.partition
        if not page.has_more:
            return
        cursor = page.cursor


def _checked_partitions(
    instance: dg.DagsterInstance, run_id: str, key: dg.AssetCheckKey, since: float
) -> Iterator[str]:
    """The partitions the run evaluated the check `key` on, reading its executions newest first back to
    `since`."""
    cursor = None
    while True:
        page = instance.event_log_storage.get_asset_check_execution_history(key, limit=RECORDS_PAGE, cursor=cursor)
        for rec in page:
            if rec.run_id == run_id and rec.evaluation is not None and rec.partition is not None:
                yield rec.partition
        if len(page) < RECORDS_PAGE or page[-1].create_timestamp < since:
            return
        cursor = page[-1].id


def recovered_report(handle, config, now: int) -> StepReport | None:
    """A cleaning at `now` committed in the store (its run killed before recording it), as a report."""
    committed = sorted(
        (m for m in handle.recent_manifests() if m.last_cleaning and m.last_cleaning.now == now),
        key=lambda m: m.version,
    )
    if not committed:
        return None
    after = committed[0]
    before = handle.manifest_version(after.version - 1)
    summary = after.last_cleaning
    stats = CleaningStats.of(summary.figures)
    return StepReport(
        evaluation=evaluate(before, config, now),
        cleaned=True,
        reason=summary.reason,
        checkpoint=after.checkpoint,
        stats=stats,
        log=handle.name,
        before_version=before.version,
        after_version=after.version,
    )
