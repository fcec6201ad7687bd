"""A batch run's SQLite instance builds one SQLAlchemy engine a shard, not one a write (defs/batches/instance_pool.py),
and what it writes reads back as Dagster wrote it."""

from __future__ import annotations

import dagster as dg
from sqlalchemy import event
from sqlalchemy.engine import Engine

from compaction_assets.defs.batches.instance_pool import hold_instance_connections

WRITES = 20


def _engines_built_while(work) -> int:
    """How many engines connected for the first time (each engine does once) while `work()` ran."""
    built: list[int] = []

    def count(_dbapi_connection, _record) -> None:
        built.append(1)

    event.listen(Engine, "first_connect", count)
    try:
        work()
    finally:
        event.remove(Engine, "first_connect", count)
    return len(built)


def _writes(instance: dg.DagsterInstance, start: int) -> None:
    for i in range(start, start + WRITES):
        instance.report_runless_asset_event(dg.AssetMaterialization("written", metadata={"i": i}))
        assert instance.event_log_storage.supports_asset_checks  # asked at every check's event


def test_a_batch_builds_an_engine_a_shard_not_one_a_write(tmp_path):
    with dg.instance_for_test(temp_dir=str(tmp_path)) as instance:
        as_dagster_does = _engines_built_while(lambda: _writes(instance, 0))
        assert as_dagster_does >= 2 * WRITES  # an engine a transaction (the run's shard, the index), a has_table
        hold_instance_connections(instance, "run-1")
        held = _engines_built_while(lambda: _writes(instance, WRITES))
        assert held <= 5  # two a shard (its first transaction Dagster's own, then ours) and the first has_table
        latest = instance.get_latest_materialization_event(dg.AssetKey("written"))
        assert latest is not None and latest.asset_materialization.metadata["i"].value == 2 * WRITES - 1
        records = instance.fetch_materializations(dg.AssetKey("written"), limit=100).records
        assert len(records) == 2 * WRITES
