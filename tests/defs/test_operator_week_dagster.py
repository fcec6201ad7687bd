"""The Dagster side of issue 28 (item 11) on a real instance: the demo's runs are the sensors' (a batch), the
jobs say what they do, a partition's page keeps the sensor's observations apart from the cleaning's
materialization, and a topics file that cannot be applied does not stop a step."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import dagster as dg
import pytest

from compaction_assets import demo, settings
from compaction_assets.defs.batches.requests import decode_logs
from compaction_assets.store.log_store import LogStore

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def demo_env(tmp_path, monkeypatch, spark):
    for var in ("COMPACTION_TOPICS", "COMPACTION_ALERT_WEBHOOK_URL", "COMPACTION_ALERT_WEBHOOK_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COMPACTION_STORE", str(tmp_path / "store"))
    monkeypatch.setenv("COMPACTION_LANDING", str(tmp_path / "landing"))
    monkeypatch.setenv("COMPACTION_LATEST_STATE", str(tmp_path / "latest"))
    from resources.log_store import REPO_TOPICS

    store = str(tmp_path / "store")
    demo.prepare_folders(store, str(tmp_path / "landing"), str(tmp_path / "latest"))
    demo.apply_demo_topics(store, REPO_TOPICS)
    demo.write_landing(tmp_path / "landing", users=50, events=300)
    return store


def test_the_demos_runs_are_the_sensors_batch_without_dagster_warnings(demo_env, monkeypatch):
    from compaction_assets.definitions import defs
    from compaction_assets.defs.automation.sensors import dirty_ratio_sensor

    monkeypatch.setenv(settings.BATCH_MIN_LOGS, demo.DEMO_BATCH_MIN_LOGS)  # as the demo sets it
    with dg.instance_for_test() as instance, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs, requests = demo.discover(defs, instance)
        assert logs == list(demo.DEMO_LOGS)
        results = demo.launch(defs, instance, requests)
        assert all(r.success for r in results)
        runs = instance.get_runs()
        assert [run.job_name for run in runs] == ["ingest_batch_job"], [run.job_name for run in runs]
        assert sorted(decode_logs(runs[0].tags["compaction/logs"])) == sorted(logs)
        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), definitions=defs, resources=defs.resources
        ) as context:
            tick = dirty_ratio_sensor.evaluate_tick(context)
    dagster_warnings = [
        f"{w.category.__name__}: {w.message}"
        for w in caught
        if "dagster" in (w.filename or "") and issubclass(w.category, UserWarning)
    ]
    assert dagster_warnings == [], dagster_warnings
    for log in logs:  # each log cleaned, checked and its latest state written, in the one run
        mats, checks = demo.log_history(results, log)
        assert {"raw_segments", "cleanable_range", "compacted_log", "latest_state"} <= set(mats), log
        assert checks and all(c.passed for c in checks), log
    materialized = set(demo.log_history(results, "user-profiles-0")[0]["compacted_log"])
    observed = {key for e in tick.asset_events if e.partition == "user-profiles-0" for key in e.metadata}
    assert "dirty_ratio" in materialized and "observed_dirty_ratio" in observed
    assert materialized & observed == set(), "one partition's page would plot two meanings as one series"
    assert LogStore(demo_env).log("user-profiles-0").manifest().last_cleaning


def test_the_sensors_jobs_have_descriptions():
    from compaction_assets.definitions import defs

    for name in ("ingest_job", "compaction_job"):
        assert defs.resolve_job_def(name).description, name


def test_a_deployments_file_that_cannot_be_applied_does_not_stop_a_step(tmp_path, caplog):
    """Issue 57: a topics file is an input, never a reason to stop work; the stored configuration runs."""
    from compaction_assets.defs.assets import CleaningConfig, cleanable_range
    from compaction_assets.log import writer
    from compaction_assets.topics.config import build_config
    from compaction_assets.topics.config_store import ConfigStore
    from resources.log_store import LogStoreResource
    from resources.spark import make_spark_resource

    store = LogStore(str(tmp_path / "store"))
    writer.append(store.log("t-0"), build_config({}), [{"key": "a", "value": "1", "timestamp": 1}])
    writer.set_checkpoint(store.log("t-0"), 1)  # cleaned once: a strategy change needs --confirm
    ConfigStore(store.storage).set_topic("t", {"segment.ms": 60000}, "test", 1)
    topics = tmp_path / "topics.yaml"
    topics.write_text("topics:\n  t: {compaction.strategy: timestamp}\n")
    resource = LogStoreResource(
        root=store.location,
        landing=str(tmp_path / "landing"),
        topics_file=str(topics),
        latest_state_root=str(tmp_path / "latest"),
    )
    with dg.instance_for_test() as instance:
        context = dg.build_asset_context(partition_key="t-0", instance=instance)
        result = cleanable_range(context, config=CleaningConfig(), log_store=resource, pyspark=make_spark_resource())
    assert result.metadata is not None
    assert resource.config_for("t-0").segment_ms == 60000 and resource.config_for("t-0").strategy == "offset"
    assert any("not applied" in r.getMessage() and "--confirm" in r.getMessage() for r in caplog.records)


def test_dg_check_defs_loads_the_same_code_location(tmp_path):
    """Dagster 1.13's `dg` serves this project (pyproject.toml [tool.dg]): `dg check defs` loads
    compaction_assets.definitions, the module workspace.yaml names, without a warning."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    dg_cli = Path(sys.executable).parent / "dg"
    proc = subprocess.run(
        [str(dg_cli), "check", "defs", "--no-check-yaml"],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(home), "VIRTUAL_ENV": str(Path(sys.executable).parent.parent)},
    )
    assert proc.returncode == 0, proc.stderr
    output = (proc.stdout + proc.stderr).strip()
    assert output == "All definitions loaded successfully.", output
    assert "compaction_assets.definitions" in (ROOT / "workspace.yaml").read_text()
