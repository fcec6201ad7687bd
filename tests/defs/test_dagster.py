"""The code location against a real Dagster instance: materializations, sensors, checks, alerts."""

import http.server
import json
import threading
from typing import ClassVar

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets.definitions import defs
from compaction_assets.defs import alerts
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.automation.sensors import (
    dirty_ratio_sensor,
    log_discovery_sensor,
    max_compaction_lag_sensor,
)
from compaction_assets.defs.checks import compacted_log_checks
from compaction_assets.defs.partitions import log_partitions
from resources.alerts import URL_ENV, AlertWebhookResource
from resources.log_store import LogStoreResource
from tests.wrong_cleaning import store_cleaning_with, writes_nothing

ASSETS = [raw_segments, cleanable_range, compacted_log, latest_state, compacted_log_checks]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def land(root, log_topic, part, name, records):
    folder = root / log_topic / f"partition={part}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture
def env(tmp_path, spark):
    topics = tmp_path / "topics.yaml"
    topics.write_text(
        "defaults: {min.cleanable.dirty.ratio: 0.3, delete.retention.ms: 1000}\n"
        "topics: {laggy: {max.compaction.lag.ms: 1000, min.cleanable.dirty.ratio: 1.0}}\n"
    )
    store = LogStoreResource(
        root=str(tmp_path / "store"),
        landing=str(tmp_path / "landing"),
        topics_file=str(topics),
        latest_state_root=str(tmp_path / "latest"),
    )
    resources = {
        "log_store": store,
        "pyspark": LazyPySparkResource(spark_config={}),
        "alert_webhook": AlertWebhookResource(),
    }
    with dg.instance_for_test() as instance:
        yield tmp_path, store, resources, instance


def materialize(assets, log, resources, instance, **kw):
    """Materialize `assets` for one partition on the test's instance, quietly."""
    return dg.materialize(
        assets,
        partition_key=log,
        resources={k: v for k, v in resources.items() if k != "alert_webhook"},
        instance=instance,
        run_config=QUIET,
        **kw,
    )


def test_materialize_a_partition_end_to_end(env):
    tmp, _store, resources, instance = env
    land(
        tmp / "landing",
        "users",
        0,
        "a.jsonl",
        [
            {"key": "u1", "value": "v1", "timestamp": 100},
            {"key": "u2", "value": "v1", "timestamp": 110},
            {"key": "u1", "value": "v2", "timestamp": 120},
            {"key": "u3", "value": None, "timestamp": 130},
        ],
    )
    instance.add_dynamic_partitions(log_partitions.name, ["users-0"])
    result = materialize(ASSETS, "users-0", resources, instance)
    assert result.success
    meta = {e.asset_key.path[-1]: e.materialization.metadata for e in result.get_asset_materialization_events()}
    assert meta["raw_segments"]["records_appended"].value == 4
    assert meta["cleanable_range"]["eligible"].value is True  # the active segment is past its deadline
    assert meta["compacted_log"]["records_read"].value == 4
    assert meta["compacted_log"]["records_written"].value == 3
    # the first cleaning: nothing was clean, every byte of the (deadline-sealed) log was dirty
    assert meta["compacted_log"]["dirty_ratio"].value == 1.0
    checks = {c.check_name: c.passed for c in result.get_asset_check_evaluations()}
    assert checks == {
        "latest_value_per_key": True,
        "tombstone_retention": True,
        "offsets_and_order_preserved": True,
        "max_compaction_delay": True,
    }
    assert meta["latest_state"]["keys"].value == 2  # u1 and u2; u3 is deleted

    again = materialize([raw_segments], "users-0", resources, instance)  # idempotent ingestion
    assert again.asset_materializations_for_node("raw_segments")[0].metadata["files_ingested"].value == 0


def test_a_bad_landing_file_is_reported_and_nothing_of_it_written(env):
    tmp, store, resources, instance = env
    land(tmp / "landing", "users", 1, "a.jsonl", [{"key": "u1", "value": "v1", "timestamp": 100}])
    (tmp / "landing" / "users" / "partition=1" / "b.jsonl").write_text(
        '{"key": "u2", "value": "x", "timestamp": 1}\n{"key": nul\n'
    )
    instance.add_dynamic_partitions(log_partitions.name, ["users-1"])
    result = materialize([raw_segments], "users-1", resources, instance, raise_on_error=False)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "b.jsonl: line 2: malformed JSON" in failure.event_specific_data.error.message
    m = store.handle("users-1").manifest()
    assert m.log_end_offset == 1 and m.ingested == ("a.jsonl",)


def test_sensors_discover_ingest_and_request_cleanings(env):
    tmp, _store, resources, instance = env
    land(
        tmp / "landing",
        "users",
        0,
        "a.jsonl",
        [{"key": f"k{i % 3}", "value": str(i), "timestamp": 100 + i} for i in range(9)],
    )
    land(tmp / "landing", "laggy", 0, "a.jsonl", [{"key": f"k{i}", "value": "1", "timestamp": 100} for i in range(5)])
    land(tmp / "landing", "bad$topic", 0, "a.jsonl", [{"key": "k", "value": "v", "timestamp": 1}])
    (tmp / "landing" / "users" / "partition=x").mkdir()

    def tick(sensor, cursor=None):
        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), cursor=cursor, resources=resources, definitions=defs
        ) as ctx:
            return sensor.evaluate_tick(ctx)

    found = tick(log_discovery_sensor)
    keys = sorted(found.dynamic_partitions_requests[0].partition_keys)
    assert keys == ["laggy-0", "users-0"]  # bad$topic and partition=x are refused
    instance.add_dynamic_partitions(log_partitions.name, keys)
    assert sorted(r.partition_key for r in found.run_requests) == keys
    for log in ("users-0", "laggy-0"):
        assert materialize([raw_segments], log, resources, instance).success
    assert tick(log_discovery_sensor).run_requests == []  # nothing new to ingest

    first = tick(dirty_ratio_sensor)  # active segments past their deadline count as sealed
    assert [r.partition_key for r in first.run_requests] == ["users-0"]
    run_key = first.run_requests[0].run_key
    assert run_key.startswith("users-0:v") and run_key.endswith(":dirty_ratio")
    # one observation per log, plus the across-logs figures (no partition: SPEC §8)
    assert {e.partition for e in first.asset_events} == {"users-0", "laggy-0", None}
    store_figures = [e for e in first.asset_events if e.partition is None][0].metadata
    assert store_figures["uncleanable-partitions-count"].value == 0
    assert store_figures["uncleanable-bytes"].value == 0
    assert tick(dirty_ratio_sensor).run_requests[0].run_key == run_key  # same state, same key
    quiet = tick(dirty_ratio_sensor, cursor=first.cursor)
    # unchanged figures are not recorded again (laggy-0's delay grows with the clock, so it is)
    assert {e.partition for e in quiet.asset_events} == {"laggy-0"}

    lag = tick(max_compaction_lag_sensor)
    assert [(r.partition_key, r.tags["reason"]) for r in lag.run_requests] == [("laggy-0", "max_compaction_lag")]


def test_a_tick_reads_each_topics_configuration_once(env):
    """Over 1,000 logs of 50 topics, reading the configuration per log was 4.1 s of a 5.5 s tick."""
    tmp, store, resources, instance = env
    asked: list[str] = []

    class CountingLogStore(LogStoreResource):
        def config_for(self, log):
            asked.append(log)
            return super().config_for(log)

    counting = CountingLogStore(**store.model_dump())
    logs = [f"{topic}-{p}" for topic in ("users", "laggy") for p in range(3)]
    for log in logs:
        topic, _, p = log.rpartition("-")
        land(
            tmp / "landing",
            topic,
            p,
            "a.jsonl",
            [{"key": f"k{i % 2}", "value": str(i), "timestamp": 100 + i} for i in range(4)],
        )
        assert counting.config_for(log) == store.config_for(log)
    instance.add_dynamic_partitions(log_partitions.name, logs)
    for log in logs:
        assert materialize([raw_segments], log, resources, instance).success
    asked.clear()
    with dg.build_sensor_context(
        instance_ref=instance.get_ref(), resources={**resources, "log_store": counting}, definitions=defs
    ) as ctx:
        result = dirty_ratio_sensor.evaluate_tick(ctx)
    assert sorted(asked, key=lambda log: log.split("-")[0]) == ["laggy-0", "users-0"]
    assert {e.partition for e in result.asset_events} == {*logs, None}  # still every log observed
    assert sorted(r.partition_key for r in result.run_requests) == [f"users-{p}" for p in range(3)]


class _Hook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str | None, dict]]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.received.append((self.headers.get("Authorization"), json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Hook.received = []
    monkeypatch.delenv(URL_ENV, raising=False)
    yield (
        AlertWebhookResource(url=f"http://127.0.0.1:{server.server_port}/alerts", token="s3cret-token"),
        _Hook.received,
    )
    server.shutdown()


def run_status_sensors(instance, resource) -> None:
    """What the daemon does once runs finish: each alert sensor sees each run of its status once."""
    for record in instance.get_run_records():
        run = record.dagster_run
        if run.status == dg.DagsterRunStatus.FAILURE:
            event = [e for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)][0]
            ctx = dg.build_run_status_sensor_context(
                sensor_name="run_failure_alert",
                dagster_instance=instance,
                dagster_run=run,
                dagster_event=event.get_dagster_event(),
                resources={"alert_webhook": resource},
            ).for_run_failure()
            alerts.run_failure_alert(ctx)
        elif run.status == dg.DagsterRunStatus.SUCCESS:
            event = [e for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_SUCCESS)][0]
            ctx = dg.build_run_status_sensor_context(
                sensor_name="check_failure_alert",
                dagster_instance=instance,
                dagster_run=run,
                dagster_event=event.get_dagster_event(),
                resources={"alert_webhook": resource},
            )
            alerts.check_failure_alert(ctx)


def test_a_corrupted_log_fails_the_blocking_check_and_alerts_once(env, webhook, caplog):
    """One blocking check failure: the step and the run fail too, yet exactly one webhook call, the check's."""
    tmp, _store, resources, instance = env
    resource, received = webhook
    land(
        tmp / "landing",
        "users",
        2,
        "a.jsonl",
        [{"key": f"k{i % 2}", "value": str(i), "timestamp": 100 + i} for i in range(6)],
    )
    instance.add_dynamic_partitions(log_partitions.name, ["users-2"])
    assert materialize([raw_segments, cleanable_range], "users-2", resources, instance).success
    # a wrong cleaning: it decides, then writes nothing, so superseded records stay visible
    wrong = {**resources, "log_store": store_cleaning_with(resources["log_store"], writes_nothing())}
    result = materialize([compacted_log, compacted_log_checks], "users-2", wrong, instance, raise_on_error=False)
    evaluations = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert evaluations["latest_value_per_key"].passed is False
    assert evaluations["latest_value_per_key"].severity == dg.AssetCheckSeverity.ERROR

    assert not result.success  # the blocking check stops the run
    run_status_sensors(instance, resource)  # the successful first run and the failed one
    assert len(received) == 1
    auth, body = received[0]
    assert auth == "Bearer s3cret-token"
    assert body["log"] == "users-2" and body["check"] == "latest_value_per_key" and body["severity"] == "ERROR"
    assert body["run"] == result.run_id and "not their key's winner" in body["reason"]
    assert body["examples"] and len(body["examples"]) <= alerts.MAX_EXAMPLES
    assert "s3cret-token" not in caplog.text


def test_a_failed_run_alerts_once_naming_its_step(env, webhook):
    tmp, _store, resources, instance = env
    resource, received = webhook
    (tmp / "landing" / "users" / "partition=3").mkdir(parents=True)
    (tmp / "landing" / "users" / "partition=3" / "a.jsonl").write_text('{"key": null, "value": "x", "timestamp": 1}\n')
    instance.add_dynamic_partitions(log_partitions.name, ["users-3"])
    result = materialize([raw_segments], "users-3", resources, instance, raise_on_error=False)
    assert not result.success
    run_status_sensors(instance, resource)
    [(_, body)] = received
    assert body["run"] == result.run_id and body["log"] == "users-3" and body["step"] == "raw_segments"
    assert body["check"] is None and "key" in body["reason"]
    # the reason is the failure's own words, not Dagster's class path (issue 28)
    assert body["reason"].startswith("ingestion of users-3 stopped: "), body["reason"]


def test_webhook_url_must_be_http():
    with pytest.raises(Exception, match="http or https"):
        AlertWebhookResource(url="file:///etc/passwd").resolved_url()
