"""A deleted topic's partitions leave the Dagster instance: the discovery sensor deletes the dynamic
partitions of its logs (gone from the store, their landing files set aside), and requests no ingestion."""

from __future__ import annotations

import json

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from compaction_assets.cli import main
from compaction_assets.definitions import defs
from compaction_assets.defs.assets import raw_segments
from compaction_assets.defs.automation.sensors import log_discovery_sensor
from compaction_assets.defs.partitions import LOG_PARTITIONS
from resources.log_store import LogStoreResource


def land(root, topic, name, records):
    folder = root / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def test_the_discovery_sensor_deletes_a_deleted_topic_s_partitions(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPACTION_TABLES", "0")
    landing, store = tmp_path / "landing", str(tmp_path / "store")
    log_store = LogStoreResource(root=store, landing=str(landing), latest_state_root=str(tmp_path / "latest"))
    resources = {"log_store": log_store, "pyspark": LazyPySparkResource(spark_config={})}
    for topic in ("users", "orders"):
        land(landing, topic, "a.jsonl", [{"key": "k", "value": "v", "timestamp": 1}])
    with dg.instance_for_test() as instance:

        def tick():
            with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx:
                return log_discovery_sensor.evaluate_tick(ctx)

        [added] = tick().dynamic_partitions_requests or []
        instance.add_dynamic_partitions(LOG_PARTITIONS, list(added.partition_keys or []))
        for log in ("orders-0", "users-0"):
            assert dg.materialize([raw_segments], partition_key=log, resources=resources, instance=instance).success
        assert tick().run_requests == []

        for topic, left in (("users", ["orders-0"]), ("orders", [])):
            assert main(["--store", store, "topic", "delete", topic, "--yes", "--landing", str(landing)]) == 0, (
                capsys.readouterr()
            )
            found = tick()
            assert found.run_requests == []  # its landing files are not ingested again
            [request] = found.dynamic_partitions_requests or []
            assert isinstance(request, dg.DeleteDynamicPartitionsRequest)
            assert list(request.partition_keys or []) == [f"{topic}-0"]
            instance.delete_dynamic_partition(LOG_PARTITIONS, f"{topic}-0")
            assert instance.get_dynamic_partitions(LOG_PARTITIONS) == left
