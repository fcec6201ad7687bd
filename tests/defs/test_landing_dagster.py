"""A bad landing file in Dagster (issue 57): it stops only its own log's ingestion in a batch and shows as
that log's failure; set aside, the log's other files are ingested; and the discovery sensor records each
log's landing backlog (files, bytes, the oldest's age, files set aside) as observations of raw_segments,
once per change."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg

from compaction_assets.defs import clock
from compaction_assets.defs.automation.sensors import log_discovery_sensor
from compaction_assets.defs.batches.jobs import ingest_batch_job
from compaction_assets.defs.batches.outcome import FAILURE_KEY
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.ingest.quarantine import Quarantine, SetAside
from tests.defs.test_batches import NOW, env, land, records, run_batch  # noqa: F401 (env: a fixture)


def bad(landing: Path, log: str, name: str = "b.jsonl") -> Path:
    topic, part = log.rsplit("-", 1)
    path = landing / topic / f"partition={part}" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"key": "k", "value": "v"}]) + "\n")
    return path


def observations(result, log: str | None = None) -> dict[str, dict]:
    """The raw_segments observations of a run or a tick, by partition: {log: metadata values}."""
    events = getattr(result, "asset_events", None)
    if events is None:
        events = [
            e.event_specific_data.asset_observation
            for e in result.all_events
            if e.event_type_value == "ASSET_OBSERVATION"
        ]
    found = {
        e.partition: {k: v.value for k, v in e.metadata.items()}
        for e in events
        if isinstance(e, dg.AssetObservation) and e.asset_key == dg.AssetKey("raw_segments")
    }
    return found if log is None else found[log]


def test_a_bad_file_in_a_batch_stops_only_its_log_and_once_set_aside_the_rest_is_ingested(env):  # noqa: F811
    tmp, store, resources, instance = env
    logs = ["pay-0", "pay-1", "pay-2"]
    for log in logs:
        land(tmp / "landing", log, records(5))
    path = bad(tmp / "landing", "pay-1")
    land(tmp / "landing", "pay-1", records(3), name="c.jsonl")
    instance.add_dynamic_partitions(log_partitions.name, logs)
    result = run_batch(ingest_batch_job, logs, resources, instance, op="ingest_batch_op")
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "1 of 3 log(s) failed" in failure.event_specific_data.error.message
    assert "expected a JSON object, got list" in observations(result, "pay-1")[FAILURE_KEY]
    assert str(path) in observations(result, "pay-1")[FAILURE_KEY]
    for log in ("pay-0", "pay-2"):  # the others are ingested (and cleaned when due)
        assert store.handle(log).manifest().log_end_offset == 5
    assert store.handle("pay-1").manifest().log_end_offset == 5, "the files before the bad one stay ingested"

    Quarantine(store.store.storage).add("pay-1", SetAside("b.jsonl", "a JSON array", 1, "test", ("b.jsonl",)))
    again = run_batch(ingest_batch_job, ["pay-1"], resources, instance, op="ingest_batch_op", now=NOW + 1)
    assert again.success
    [done] = again.asset_materializations_for_node("ingest_batch_op")
    assert done.metadata["files_set_aside"].value == 1 and done.metadata["files_ingested"].value == 1
    assert store.handle("pay-1").manifest().log_end_offset == 8


def test_discovery_observes_each_logs_landing_backlog_once_per_change(env):  # noqa: F811
    tmp, store, resources, instance = env
    land(tmp / "landing", "users-0", records(4))
    old = tmp / "landing" / "users" / "partition=0" / "a.jsonl"
    os.utime(old, ((NOW - 90_000) / 1000, (NOW - 90_000) / 1000))
    bad(tmp / "landing", "users-1")
    instance.add_dynamic_partitions(log_partitions.name, ["users-0", "users-1"])

    def tick(cursor=None):
        from compaction_assets.definitions import defs

        with (
            clock.frozen_at(NOW),
            dg.build_sensor_context(
                instance_ref=instance.get_ref(), resources=resources, definitions=defs, cursor=cursor
            ) as ctx,
        ):
            return log_discovery_sensor.evaluate_tick(ctx)

    first = tick()
    seen = observations(first)
    assert seen["users-0"]["landing_pending_files"] == 1
    assert seen["users-0"]["landing_pending_bytes"] == old.stat().st_size
    assert seen["users-0"]["landing_oldest_pending_age_ms"] == 90_000
    assert seen["users-1"]["landing_files_set_aside"] == 0
    assert observations(tick(first.cursor)) == {}, "nothing changed: nothing observed again"
    [requested] = [r for r in first.run_requests if r.partition_key == "users-1"]

    Quarantine(store.store.storage).add("users-1", SetAside("b.jsonl", "a JSON array", 1, "test", ("b.jsonl",)))
    after = tick(first.cursor)
    assert observations(after) == {
        "users-1": {
            "landing_pending_files": 0,
            "landing_pending_bytes": 0,
            "landing_oldest_pending_age_ms": 0,
            "landing_files_set_aside": 1,
            "landing_set_aside": [{"file": "b.jsonl", "reason": "a JSON array", "by": "test", "at_ms": 1}],
        }
    }
    assert [r.partition_key for r in after.run_requests] == ["users-0"], "the file set aside is not pending"
    assert requested.run_key not in {r.run_key for r in after.run_requests}
