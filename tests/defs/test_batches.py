"""Batch runs against a real Dagster instance and a real Spark: each partition's history is the one a run
of its own records; a log that fails is isolated; a killed batch is finished by its re-run."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool, QueuePool

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.defs import alerts, clock
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.automation.sensors import dirty_ratio_sensor, log_discovery_sensor
from compaction_assets.defs.batches import requests as batch_requests
from compaction_assets.defs.batches.instance_pool import held_shards, hold_instance_connections
from compaction_assets.defs.batches.jobs import compaction_batch_job, ingest_batch_job
from compaction_assets.defs.batches.outcome import FAILURE_KEY
from compaction_assets.defs.checks import compacted_log_checks, table_matches_latest_state
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.errors import ConfigError
from compaction_assets.table.reading import read as table_read
from resources.log_store import LogStoreResource
from tests.wrong_cleaning import store_cleaning_with, writes_nothing

ASSETS = [raw_segments, cleanable_range, compacted_log, latest_state, compacted_log_checks, table_matches_latest_state]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
NOW = 2_000_000_000_000  # past every segment's deadline: a fresh log is due
ROOT = Path(__file__).resolve().parents[2]
# differ between any two runs, whichever path: the run's id, the time a cleaning took, where a table went,
# the topic table's snapshot id (random), the snapshots a commit expired (the topic's, by commit order) and the
# memory the latest state's path was weighed against (what is available at that moment)
VOLATILE = {
    "cleaning_run",
    "clean_time_secs",
    "path",
    "table_snapshot_id",
    "table_snapshots_expired",
    "latest_state_why",
}
# what latest_state's own table commit wrote: a batch's ingestion commits the landed records first (the
# cleaning's commit then writes its marks), a run of the whole chain commits them at latest_state; the table's
# rows are compared by table_matches_latest_state on both paths (and the way each commit found its change)
COMMIT_WRITES = {
    "table_rows_added",
    "table_rows_deleted",
    "table_files_added",
    "table_delete_files_added",
    "table_commit_path",
    "table_commit_why",
}


def land(landing: Path, log: str, records: list[dict], name: str = "a.jsonl") -> None:
    topic, part = log.rsplit("-", 1)
    folder = landing / topic / f"partition={part}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def records(n: int, keys: int = 3) -> list[dict]:
    return [{"key": f"k{i % keys}", "value": str(i), "timestamp": 100 + i} for i in range(n)]


def make_env(root: Path, topics: Path | None = None, lock_ttl: float | None = None) -> tuple[LogStoreResource, dict]:
    root.mkdir(parents=True, exist_ok=True)
    topics = topics or root / "topics.yaml"
    topics.write_text("defaults: {min.cleanable.dirty.ratio: 0.3, delete.retention.ms: 1000}\n")
    store = LogStoreResource(
        root=str(root / "store"),
        landing=str(root / "landing"),
        topics_file=str(topics),
        latest_state_root=str(root / "latest"),
        lock_ttl_seconds=lock_ttl,
    )
    return store, {"log_store": store, "pyspark": LazyPySparkResource(spark_config={})}


@pytest.fixture
def env(tmp_path, spark):
    store, resources = make_env(tmp_path)
    with dg.instance_for_test() as instance:
        yield tmp_path, store, resources, instance


def batch_config(logs, op="compaction_batch_op", now=NOW) -> dict:
    return {**QUIET, "ops": {op: {"config": {"logs": list(logs), "now_ms": now}}}}


def run_batch(job, logs, resources, instance, op="compaction_batch_op", now=NOW):
    return job.execute_in_process(
        run_config=batch_config(logs, op, now), instance=instance, resources=resources, raise_on_error=False
    )


def own(log: str, key: str, value):
    """A metadata value as it concerns `log`: the topic's table lists every log it reflects, in the order
    they committed (a batch commits them as they finish), so only the log's own entry is compared."""
    return {log: value.get(log)} if key == "table_log_versions" else value


def history(instance, log: str) -> dict:
    """A partition's history: each asset's materializations' metadata and each check's evaluations."""
    out = {}
    for asset in ("raw_segments", "cleanable_range", "compacted_log", "latest_state"):
        recs = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[log]), limit=10
        ).records
        out[asset] = [
            {
                k: own(log, k, v.value)
                for k, v in r.asset_materialization.metadata.items()
                if k not in VOLATILE and k not in COMMIT_WRITES
            }
            for r in recs
        ]
    for spec in [*compacted_log_checks.check_specs, *table_matches_latest_state.check_specs]:
        recs = instance.event_log_storage.get_asset_check_execution_history(spec.key, limit=200)
        out[spec.name] = [
            (
                r.evaluation.passed,
                r.evaluation.severity,
                r.evaluation.blocking,
                {k: v.value for k, v in r.evaluation.metadata.items() if k not in VOLATILE},
            )
            for r in recs
            if r.partition == log and r.evaluation is not None
        ]
    return out


def assert_same_histories(expected: dict, got: dict) -> None:
    """Every log's history in `got` is the one in `expected`: as many events of each, with equal metadata."""
    for log in expected:
        for key in expected[log]:
            assert len(got[log][key]) == len(expected[log][key]), (log, key)
            for b, o in zip(got[log][key], expected[log][key]):
                differ = (
                    {k: (b.get(k), o.get(k)) for k in set(b) | set(o) if b.get(k) != o.get(k)}
                    if isinstance(b, dict)
                    else ({} if b == o else {"evaluation": (b, o)})
                )
                assert not differ, (log, key, differ)


def test_batch_history_equals_the_single_partition_path(tmp_path, spark):
    """The same logs, the same time: one run per partition in one store, one batch in another."""
    logs = ["users-0", "users-1", "orders-0"]
    histories = []
    for path in ("single", "batch"):
        store, resources = make_env(tmp_path / path, tmp_path / "topics.yaml")  # the same file: it is named
        for n, log in enumerate(logs):
            land(tmp_path / path / "landing", log, records(12 + n))
        with dg.instance_for_test() as instance:
            instance.add_dynamic_partitions(log_partitions.name, logs)
            if path == "single":
                for log in logs:
                    config = {"now_ms": NOW}
                    result = dg.materialize(
                        ASSETS,
                        partition_key=log,
                        instance=instance,
                        resources=resources,
                        run_config={
                            **QUIET,
                            "ops": {"cleanable_range": {"config": config}, "compacted_log": {"config": config}},
                        },
                    )
                    assert result.success
            else:
                result = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op")
                assert result.success
                assert {e.asset_key.path[-1] for e in result.get_asset_materialization_events()} == {
                    "raw_segments",
                    "cleanable_range",
                    "compacted_log",
                    "latest_state",
                }
                for topic, names in (("users", ["users-0", "users-1"]), ("orders", ["orders-0"])):
                    # one snapshot per topic right after the ingestions (the landed records reach the table
                    # before any cleaning), then one after the batch's cleanings, recording each of its logs'
                    # versions (the first may be expired by then: delete.retention.ms 1000 here)
                    snapshot = table_read.history(table_read.open_table(store.handle(names[0]).st, topic)[0])[-1]
                    assert snapshot.log_versions == {n: store.handle(n).manifest().version for n in names}
                    for name in names:  # the rows came with the ingestion's commit: the cleaning's adds none
                        [state] = instance.fetch_materializations(
                            dg.AssetRecordsFilter(asset_key=dg.AssetKey("latest_state"), asset_partitions=[name]),
                            limit=1,
                        ).records
                        assert state.asset_materialization.metadata["table_rows_added"].value == 0
            histories.append({log: history(instance, log) for log in logs})
    single, batch = histories
    assert_same_histories(single, batch)
    for log in logs:
        assert len(batch[log]["compacted_log"]) == 1 and batch[log]["compacted_log"][0]["cleaned"] is True
        assert [c[0] for name in ("latest_value_per_key", "max_compaction_delay") for c in batch[log][name]] == [
            True,
            True,
        ]


def test_a_batch_on_postgres_holds_pooled_connections_and_records_the_same_history(tmp_path, spark, postgres_server):
    """The same batch on the default SQLite instance and on a PostgreSQL one (docs/deployment.md): the run
    holds its connections (PostgreSQL: a pool each storage; SQLite: its shards open), the history is the same."""
    logs = ["users-0", "users-1", "orders-0"]
    histories = []
    storage = {"storage": {"postgres": {"postgres_url": postgres_server.new_database("batch_pool")}}}
    for path in ("sqlite", "postgres"):
        _, resources = make_env(tmp_path / path, tmp_path / "topics.yaml")
        for n, log in enumerate(logs):
            land(tmp_path / path / "landing", log, records(12 + n))
        with dg.instance_for_test(overrides=storage if path == "postgres" else None) as instance:
            storages = (instance.event_log_storage, instance.run_storage, instance.schedule_storage)
            assert path == "sqlite" or {type(s._engine.pool) for s in storages} == {NullPool}  # Dagster's default
            instance.add_dynamic_partitions(log_partitions.name, logs)
            result = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op")
            assert result.success
            if path == "postgres":
                assert {type(s._engine.pool) for s in storages} == {QueuePool}
                engine = instance.event_log_storage._engine
                hold_instance_connections(instance, result.run_id)  # as the run's second step: once an instance
                assert instance.event_log_storage._engine is engine and held_shards(instance) == []
            else:  # the index and the run's shard, each with its WAL kept (not deleted at each transaction's end)
                shards = [instance.event_log_storage.path_for_shard(s) for s in ("index", result.run_id)]
                assert held_shards(instance) == sorted(shards)
                assert all(os.path.exists(f"{shard}-wal") for shard in shards)
                assert [synchronous(shard) for shard in shards] == [NORMAL, NORMAL]  # the run's writes, too
            histories.append({log: history(instance, log) for log in logs})
    assert_same_histories(*histories)
    assert all(histories[1][log]["compacted_log"] for log in logs)


NORMAL, FULL = 1, 2  # PRAGMA synchronous


def synchronous(path) -> int:
    """PRAGMA synchronous of a connection SQLAlchemy opens to `path` in this process (as Dagster's are)."""
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text("PRAGMA synchronous")).scalar())
    finally:
        engine.dispose()


def test_a_batch_writes_its_sqlite_instance_with_normal_sync_unless_told_full(tmp_path, monkeypatch):
    (tmp_path / "full").mkdir()
    (tmp_path / "normal").mkdir()
    monkeypatch.setenv(settings.BATCH_SQLITE_SYNC, "full")
    with dg.instance_for_test(temp_dir=str(tmp_path / "full")) as instance:
        hold_instance_connections(instance, "run-full")
        assert synchronous(instance.event_log_storage.path_for_shard("index")) == FULL
    monkeypatch.setenv(settings.BATCH_SQLITE_SYNC, "normal")
    with dg.instance_for_test(temp_dir=str(tmp_path / "normal")) as instance:
        hold_instance_connections(instance, "run-normal")
        assert synchronous(instance.event_log_storage.path_for_shard("index")) == NORMAL
        assert synchronous(tmp_path / "full" / "history" / "runs.db") == FULL  # another instance's files
        assert synchronous(tmp_path / "catalog.db") == FULL  # a table catalog's, elsewhere
    monkeypatch.setenv(settings.BATCH_SQLITE_SYNC, "off")
    with pytest.raises(ConfigError, match="COMPACTION_BATCH_SQLITE_SYNC='off': must be one of normal, full"):
        settings.current()


def tick(sensor, instance, resources):
    from compaction_assets.definitions import defs

    with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx:
        return sensor.evaluate_tick(ctx)


def test_sensors_request_batches_when_many_logs_are_due(env, monkeypatch):
    tmp, _store, resources, instance = env
    logs = [f"users-{i}" for i in range(settings.current().batches.min_logs)]
    for log in logs:
        land(tmp / "landing", log, records(30))
    found = tick(log_discovery_sensor, instance, resources)
    instance.add_dynamic_partitions(log_partitions.name, found.dynamic_partitions_requests[0].partition_keys)
    [ingest] = found.run_requests  # ten logs with new files: one batch, not ten runs
    assert ingest.job_name == "ingest_batch_job" and ingest.tags["compaction/logs"] == "users:0-9"
    assert ingest.tags["topic"] == "users" and ingest.tags["compaction/batch_size"] == "10"
    assert sorted(ingest.run_config["ops"]["ingest_batch_op"]["config"]["logs"]) == sorted(logs)
    for log in logs:  # ingested without cleaning: the dirty-ratio sensor finds them due
        assert dg.materialize(
            [raw_segments], partition_key=log, instance=instance, resources=resources, run_config=QUIET
        ).success
    with clock.frozen_at(NOW):
        [batch] = tick(dirty_ratio_sensor, instance, resources).run_requests
        assert batch.job_name == "compaction_batch_job" and batch.tags["reason"] == "dirty_ratio"
        assert batch.run_config["ops"]["compaction_batch_op"]["config"] == {"logs": sorted(logs), "now_ms": NOW}
        assert tick(dirty_ratio_sensor, instance, resources).run_requests[0].run_key == batch.run_key
        # bounded by bytes: a log's cleanable bytes are ~600 here, so two logs a batch
        monkeypatch.setenv(settings.BATCH_MAX_BYTES, "1300")
        split = tick(dirty_ratio_sensor, instance, resources).run_requests
        assert [len(r.run_config["ops"]["compaction_batch_op"]["config"]["logs"]) for r in split] == [2] * 5
        monkeypatch.delenv(settings.BATCH_MAX_BYTES)
        result = compaction_batch_job.execute_in_process(
            run_config={**QUIET, **batch.run_config}, tags=batch.tags, instance=instance, resources=resources
        )
        assert result.success
        assert tick(dirty_ratio_sensor, instance, resources).run_requests == []
    # one log due: today's run of its own
    land(tmp / "landing", "users-0", records(30), name="b.jsonl")
    [one] = tick(log_discovery_sensor, instance, resources).run_requests
    assert one.job_name == "ingest_job" and one.partition_key == "users-0"


def test_beside_another_batch_of_its_topic_an_ingest_batch_commits_its_tables_after_the_cleanings(env):
    """Alone, an ingest batch commits its topics' tables right after the ingestions (the landed records) and
    again after the cleanings (then adding no rows); beside another batch of the same topic, queued or
    running, its cleaned logs commit after their cleanings only (the two runs' commits of one table would
    race); a batch of another topic beside it changes nothing."""
    tmp, store, resources, instance = env
    found = {}
    for case, beside in (("alone", None), ("other topic", "orders-0"), ("same topic", "users-9")):
        other = dg.DagsterRun(
            job_name=compaction_batch_job.name,
            run_id=str(uuid.uuid4()),
            status=dg.DagsterRunStatus.STARTED,
            tags=batch_requests.batch_tags([beside]) if beside else {},
        )
        instance.add_run(other)
        log = f"users-{len(found)}"
        land(tmp / "landing", log, records(12))
        assert run_batch(ingest_batch_job, [log], resources, instance, op="ingest_batch_op").success
        [state] = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("latest_state"), asset_partitions=[log]), limit=1
        ).records
        snapshots = table_read.history(table_read.open_table(store.handle(log).st, "users")[0])
        found[case] = (
            state.asset_materialization.metadata["table_rows_added"].value,
            sorted({s.log_versions[log] for s in snapshots if log in s.log_versions}),
        )
        instance.report_run_canceled(other)
    # (rows the cleaning's commit added, the log's versions the table's snapshots reflected): the ingested
    # version 1, then the cleaned 3; beside its topic's batch, the cleaned version only, with its 3 keys
    assert found == {"alone": (0, [1, 3]), "other topic": (0, [1, 3]), "same topic": (3, [3])}


def test_the_sensors_leave_the_logs_a_batch_holds_to_it(env):
    """While a batch holds a log, the dirty-ratio sensor neither requests nor observes it (the batch records
    its state) and discovery does not ingest its new files; once the batch ends, the next tick observes the
    state the batch left. The other logs are observed and requested as before."""
    tmp, _store, resources, instance = env
    for log in ("users-0", "users-1"):
        land(tmp / "landing", log, records(30))
    found = tick(log_discovery_sensor, instance, resources)
    instance.add_dynamic_partitions(log_partitions.name, found.dynamic_partitions_requests[0].partition_keys)
    for log in ("users-0", "users-1"):
        assert dg.materialize(
            [raw_segments], partition_key=log, instance=instance, resources=resources, run_config=QUIET
        ).success
    held = dg.DagsterRun(
        job_name=compaction_batch_job.name,
        run_id=str(uuid.uuid4()),
        status=dg.DagsterRunStatus.STARTED,
        tags=batch_requests.batch_tags(["users-0"]),
    )
    instance.add_run(held)
    for log in ("users-0", "users-1"):
        land(tmp / "landing", log, records(30), name="b.jsonl")
    assert [r.partition_key for r in tick(log_discovery_sensor, instance, resources).run_requests] == ["users-1"]

    def observed(cursor=None):
        from compaction_assets.definitions import defs

        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), resources=resources, definitions=defs, cursor=cursor
        ) as ctx:
            result = dirty_ratio_sensor.evaluate_tick(ctx)
        return result, sorted(e.partition for e in result.asset_events if e.partition)

    with clock.frozen_at(NOW):
        first, logs = observed()
        assert logs == ["users-1"] and [r.partition_key for r in first.run_requests] == ["users-1"]
        assert observed(first.cursor)[1] == []  # nothing changed
        instance.report_run_canceled(held)  # the batch ended: its log is observed (and due) again
        after, logs = observed(first.cursor)
        assert logs == ["users-0"] and [r.partition_key for r in after.run_requests] == ["users-0", "users-1"]
        assert after.asset_events[0].metadata["observed_dirty_ratio"].value > 0


def alerts_of(instance, run_id):
    run = instance.get_run_by_id(run_id)
    event = list(instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE))[0]
    ctx = dg.build_run_status_sensor_context(
        sensor_name="run_failure_alert",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=event.get_dagster_event(),
    ).for_run_failure()
    return alerts.run_failure_alerts(ctx)


def test_a_corrupt_log_in_a_batch_is_marked_and_alerted_once_the_others_commit(env):
    tmp, store, resources, instance = env
    logs = [f"pay-{i}" for i in range(4)]
    for log in logs:
        land(tmp / "landing", log, records(9))
    instance.add_dynamic_partitions(log_partitions.name, logs)
    assert run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op").success
    for log in logs:  # more records: each log is due again
        land(tmp / "landing", log, records(9), name="b.jsonl")
    bad = store.handle("pay-2")
    path = Path(bad.path(bad.manifest().segments[0].files[0].name))
    path.write_bytes(os.urandom(path.stat().st_size))

    result = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op", now=NOW + 1)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "1 of 4 log(s) failed" in failure.event_specific_data.error.message
    assert bad.manifest().uncleanable and str(path) in bad.manifest().uncleanable.error
    for log in ("pay-0", "pay-1", "pay-3"):
        cleanings = history(instance, log)["compacted_log"]
        assert len(cleanings) == 2 and cleanings[0]["cleaned"] is True
        assert store.handle(log).manifest().uncleanable is None
    assert len(history(instance, "pay-2")["compacted_log"]) == 1  # the first batch's only
    [alert] = alerts_of(instance, result.run_id)
    assert alert.log == "pay-2" and alert.step == "compacted_log" and str(path) in alert.reason

    # a re-run of the same batch (same time): the corrupt log is skipped as marked, nothing recorded twice
    again = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op", now=NOW + 1)
    assert not again.success
    assert all(len(history(instance, log)["compacted_log"]) == 2 for log in ("pay-0", "pay-1", "pay-3"))
    assert not [
        e
        for e in again.all_events
        if e.event_type_value == "ASSET_OBSERVATION" and FAILURE_KEY in e.event_specific_data.asset_observation.metadata
    ]


def test_a_blocking_check_failure_in_a_batch_blocks_only_that_partitions_latest_state(env):
    tmp, _store, resources, instance = env
    logs = ["users-0", "users-1", "users-2"]
    for log in logs:
        land(tmp / "landing", log, records(7 if log == "users-1" else 6, keys=2))
    instance.add_dynamic_partitions(log_partitions.name, logs)
    # a wrong cleaning of users-1 only (the only log of 7 records): it decides, then writes nothing
    wrong = writes_nothing(lambda decision: decision.stats.records_read == 7)
    resources = {**resources, "log_store": store_cleaning_with(resources["log_store"], wrong)}
    result = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op")
    assert not result.success
    bad = history(instance, "users-1")
    assert bad["latest_value_per_key"][0][0] is False and bad["compacted_log"] and not bad["latest_state"]
    for log in ("users-0", "users-2"):
        good = history(instance, log)
        assert good["latest_value_per_key"][0][0] is True and len(good["latest_state"]) == 1
    [alert] = alerts_of(instance, result.run_id)
    assert alert.log == "users-1" and alert.check == "latest_value_per_key"


def test_a_cleaning_committed_but_not_recorded_is_recorded_not_redone(env):
    """What a run killed between a cleaning's commit and its events leaves: its re-run records it."""
    tmp, store, resources, instance = env
    land(tmp / "landing", "users-0", records(10))
    instance.add_dynamic_partitions(log_partitions.name, ["users-0"])
    assert dg.materialize(
        [raw_segments], partition_key="users-0", instance=instance, resources=resources, run_config=QUIET
    ).success
    handle = store.handle("users-0")
    rep = engine.run(handle, store.config_for("users-0"), NOW, spark=lambda: resources["pyspark"].spark_session)
    assert rep.cleaned
    result = compaction_batch_job.execute_in_process(
        run_config=batch_config(["users-0"]), instance=instance, resources=resources
    )
    [cleaning] = history(instance, "users-0")["compacted_log"]
    assert cleaning["cleaned"] is True and cleaning["before_version"] == rep.before_version
    assert cleaning["after_version"] == rep.after_version and cleaning["records_written"] == 3
    assert handle.manifest().version == rep.after_version  # not cleaned again
    assert all(c[0] for c in history(instance, "users-0")["latest_value_per_key"])
    assert result.success


KILLED = """
import sys, dagster as dg
from compaction_assets.defs.batches.jobs import compaction_batch_job
from tests.defs.test_batches import batch_config, make_env
from pathlib import Path
store, resources = make_env(Path(sys.argv[1]))
logs = sys.argv[2].split(",")
with dg.DagsterInstance.get() as instance:
    compaction_batch_job.execute_in_process(run_config=batch_config(logs, now=int(sys.argv[3])), instance=instance,
                                            resources=resources)
"""


# In the default suite (so in CI): the one test that kills a batched run. A second process with its own
# Spark, killed, then leases left to expire: about 30 s of CPU, 1-5 minutes of wall time with the load.
def test_a_batch_killed_midway_is_finished_by_its_rerun(tmp_path, spark, monkeypatch):
    logs = [f"users-{i}" for i in range(16)]  # enough that the kill lands midway on a fast machine too
    ttl = 3.0  # the killed run's leases: a re-run waits for them to expire, as a retry's backoff does
    _store, resources = make_env(tmp_path, lock_ttl=ttl)
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for log in logs:
        land(tmp_path / "landing", log, records(40, keys=5))
        land(tmp_path / "landing", log, records(40, keys=5), name="b.jsonl")
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(log_partitions.name, logs)
        for log in logs:
            assert dg.materialize(
                [raw_segments], partition_key=log, instance=instance, resources=resources, run_config=QUIET
            ).success
        env = {
            **os.environ,
            "COMPACTION_CLEAN_CONCURRENCY": "1",
            "SPARK_MASTER": "local[1]",
            "COMPACTION_LOCK_TTL_SECONDS": str(ttl),
            "PYTHONPATH": str(ROOT),
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED, str(tmp_path), ",".join(logs), str(NOW + 1)], env=env, cwd=ROOT
        )

        # the store's manifests, not the instance's events, say how far the batch got: its cleanings commit
        # one log at a time, while their events may be written together (a kill between them is no midway)
        def cleaned() -> int:
            return sum(_store.handle(log).manifest().last_cleaning is not None for log in logs)

        # no wall bound: on a loaded machine the second process's Spark takes minutes to start
        while proc.poll() is None and cleaned() < 2:
            time.sleep(0.05)
        assert proc.poll() is None, "the batch finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert 2 <= cleaned() < len(logs)
        time.sleep(ttl + 1)

        rerun = run_batch(compaction_batch_job, logs, resources, instance, now=NOW + 1)
        assert rerun.success
        for log in logs:
            h = history(instance, log)
            assert len(h["compacted_log"]) == 1, log  # one cleaning each: nothing lost or doubled
            assert h["compacted_log"][0]["cleaned"] is True and h["compacted_log"][0]["evaluated_at_ms"] == NOW + 1
            assert len(h["latest_state"]) == 1, log
            for name in ("latest_value_per_key", "tombstone_retention", "offsets_and_order_preserved"):
                assert [c[0] for c in h[name]] == [True], (log, name)
