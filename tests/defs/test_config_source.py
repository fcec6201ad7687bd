"""Issue 57, "Configuration has one source of truth", on a real Dagster instance: the stored configuration
is what the sensors and runs use; the deployment's topics file (COMPACTION_TOPICS) is an input stored when it
changes, never a reason to stop; a run that failed on configuration is requested again once it changes."""

from __future__ import annotations

import json

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets import demo
from compaction_assets.definitions import defs
from compaction_assets.defs.assets import raw_segments
from compaction_assets.defs.automation.sensors import (
    dirty_ratio_sensor,
    log_discovery_sensor,
    max_compaction_lag_sensor,
)
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config_store import DEFAULTS_ENTRY, ConfigSource, ConfigStore
from resources.alerts import AlertWebhookResource
from resources.log_store import REPO_TOPICS, LogStoreResource, default_topics_file

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def land(root, topic, part, name, records):
    folder = root / topic / f"partition={part}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def changes(n: int, start: int = 0) -> list[dict]:
    return [{"key": f"k{i % 3}", "value": str(i), "timestamp": 100 + i} for i in range(start, start + n)]


@pytest.fixture
def deployment(tmp_path, spark):
    """A code location's resources with a deployment topics file (as COMPACTION_TOPICS names one)."""
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "defaults: {min.cleanable.dirty.ratio: 0.3}\ntopics:\n  user-profiles: {}\n  orders: {segment.ms: 600000}\n"
    )
    log_store = LogStoreResource(
        root=str(tmp_path / "store"),
        landing=str(tmp_path / "landing"),
        topics_file=str(topics),
        latest_state_root=str(tmp_path / "latest"),
    )
    resources = {
        "log_store": log_store,
        "pyspark": LazyPySparkResource(spark_config={}),
        "alert_webhook": AlertWebhookResource(),
    }
    with dg.instance_for_test() as instance:
        yield tmp_path, log_store, resources, instance


def tick(sensor, instance, resources):
    with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx:
        return sensor.evaluate_tick(ctx)


def ingest(log, resources, instance, tags=None):
    return dg.materialize(
        [raw_segments],
        partition_key=log,
        resources={k: v for k, v in resources.items() if k != "alert_webhook"},
        instance=instance,
        run_config=QUIET,
        raise_on_error=False,
        tags=tags,
    )


def test_a_config_set_under_a_running_deployment_is_what_the_sensors_and_runs_use(deployment):
    tmp, log_store, resources, instance = deployment
    logs = ["user-profiles-0", "user-profiles-1", "orders-0"]
    for log in logs:
        topic, _, part = log.rpartition("-")
        land(tmp / "landing", topic, part, "a.jsonl", changes(6))
    found = tick(log_discovery_sensor, instance, resources)
    instance.add_dynamic_partitions(log_partitions.name, sorted(found.dynamic_partitions_requests[0].partition_keys))
    for log in logs:
        assert ingest(log, resources, instance).success
    configs = ConfigStore(log_store.store.storage)
    assert configs.config_for("user-profiles").min_cleanable_dirty_ratio == 0.3  # the deployment's file, stored
    # what `compaction config set user-profiles min.cleanable.dirty.ratio=0.9` does, with the UI running
    configs.set_topic("user-profiles", {"min.cleanable.dirty.ratio": 0.9}, "config set", 5)

    ratio = tick(dirty_ratio_sensor, instance, resources)
    assert {e.partition for e in ratio.asset_events} == {*logs, None}, "every log evaluated, none skipped"
    lag = tick(max_compaction_lag_sensor, instance, resources)
    assert lag.skip_message is None or f"{len(logs)} log(s) evaluated" in lag.skip_message
    land(tmp / "landing", "user-profiles", 0, "b.jsonl", changes(3, 6))
    assert ingest("user-profiles-0", resources, instance).success, "the next ingest_job runs"
    assert log_store.config_for("user-profiles-0").min_cleanable_dirty_ratio == 0.9
    assert configs.versions("user-profiles") == [1, 2]  # the file did not undo the set


def test_an_ingestion_that_failed_on_configuration_is_requested_again_once_it_changes(deployment):
    tmp, log_store, resources, instance = deployment
    configs = ConfigStore(log_store.store.storage)
    # `payments` is not in the deployment's file: its stored configuration is its own
    configs.set_topic("payments", {"landing.format": "lenses"}, "config set", 1)  # wrong: the files are native
    land(tmp / "landing", "payments", 0, "a.jsonl", changes(4))
    instance.add_dynamic_partitions(log_partitions.name, ["payments-0"])
    (first,) = tick(log_discovery_sensor, instance, resources).run_requests
    failed = ingest("payments-0", resources, instance, tags=first.tags | {"dagster/run_key": first.run_key})
    assert not failed.success
    (failure,) = [e for e in failed.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "ingestion of payments-0 stopped" in failure.event_specific_data.error.message
    (again,) = tick(log_discovery_sensor, instance, resources).run_requests
    assert again.run_key == first.run_key, "the same file and configuration: the daemon does not repeat it"
    configs.set_topic("payments", {"landing.format": "native"}, "config set", 2)  # the fix
    (fixed,) = tick(log_discovery_sensor, instance, resources).run_requests
    assert fixed.run_key != first.run_key, "a new configuration version: a new run"
    assert ingest("payments-0", resources, instance, tags=fixed.tags | {"dagster/run_key": fixed.run_key}).success
    assert log_store.handle("payments-0").manifest().log_end_offset == 4


def test_compaction_topics_is_optional_the_stored_configuration_runs_alone(tmp_path, monkeypatch):
    monkeypatch.delenv("COMPACTION_TOPICS", raising=False)
    monkeypatch.setenv("COMPACTION_STORE", str(tmp_path / "store"))
    assert default_topics_file() is None, "unset: no file, not the repository's topics.yaml"
    log_store = LogStoreResource.from_env()
    assert log_store.topics_file is None
    ConfigStore(log_store.store.storage).set_topic("orders", {"segment.ms": 5000}, "config set", 1)
    assert log_store.config_for("orders-0").segment_ms == 5000
    monkeypatch.setenv("COMPACTION_TOPICS", "  ")  # blank is unset
    assert default_topics_file() is None


def test_the_demo_stores_the_files_defaults_so_every_later_topic_gets_them(tmp_path):
    store = str(tmp_path / "store")
    demo.apply_demo_topics(store, REPO_TOPICS)
    configs = ConfigStore(LogStore(store).storage)
    assert configs.current(DEFAULTS_ENTRY) is not None
    later = configs.describe("added-later")  # a topic the CLI or Dagster meets later: the same defaults
    assert later.source == ConfigSource.STORE_DEFAULTS and later.config["min.cleanable.dirty.ratio"] == 0.3
    assert configs.config_for("users-cdc").landing.format == "confluent"
