"""Engine faults fail the run and never mark a log; only the log's own data marks it (Kafka's uncleanable
partitions are about the log, not the machine).

- a Spark master that does not exist and a Connect endpoint that refuses connections: `clean --all` exits
  75 (transient), every log stays unmarked, and the next run with Spark back cleans them all;
- Dagster's `compacted_log` with a Spark that cannot start fails as retryable and marks nothing;
- a real Spark Connect server killed in the middle of a fleet cleaning: nothing is marked, the run exits
  75, and a run against a new server cleans every log;
- `clear-uncleanable --all` and the operator job for several logs clear every mark at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import dagster as dg
import pytest

from compaction_assets import cli
from compaction_assets.cleaning import engine, faults
from compaction_assets.errors import CompactionError, SparkSetupError
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import load_topics
from tests import cluster_helpers as ch

TOPICS = "defaults: {min.cleanable.dirty.ratio: 0.01, delete.retention.ms: 1000}\n"
NOW = 10_000_000


def make_log(store: LogStore, name: str, config, records: int = 40):
    """Two sealed segments with superseded records: eligible for a cleaning."""
    h = store.log(name)
    writer.append(
        h, config, [{"key": f"k{i % 7}", "value": f"{name}-{i}", "timestamp": 100 + i} for i in range(records)]
    )
    writer.roll(h)
    writer.append(h, config, [{"key": f"k{i % 5}", "value": f"late-{i}", "timestamp": 200 + i} for i in range(10)])
    writer.roll(h)
    return h


@pytest.fixture
def fleet(tmp_path):
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    tf = load_topics(topics)
    logs = [make_log(store, f"fleet-{p}", tf.config_for("fleet")) for p in range(4)]
    base = ["--store", store.location, "--topics", str(topics), "--now", str(NOW)]
    return store, logs, base


def cli_in_process(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def marked(logs) -> list[str]:
    return [h.name for h in logs if h.manifest().uncleanable]


@pytest.mark.parametrize("setting,value", [("SPARK_MASTER", "foo"), ("SPARK_REMOTE", "sc://127.0.0.1:1")])
def test_spark_that_cannot_start_marks_no_log(fleet, spark, capsys, monkeypatch, setting, value):
    _store, logs, base = fleet
    versions = [h.manifest().version for h in logs]
    monkeypatch.setenv(setting, value)
    rc, out, err = cli_in_process(capsys, *base, "clean", "--all")
    assert rc == cli.EXIT_TRANSIENT, err
    assert marked(logs) == [] and [h.manifest().version for h in logs] == versions
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == len(logs) + 1 and all("not marked" in e for e in errors[:-1]), err
    assert "transient" in errors[-1]
    assert out == ""  # stdout: only what ran (issue 28, item 9); the errors are on stderr
    # Spark back: the next run cleans every log
    monkeypatch.delenv(setting)
    rc, out, err = cli_in_process(capsys, *base, "clean", "--all")
    assert rc == 0, err
    assert sorted(r["log"] for r in json.loads(out) if r["cleaned"]) == [h.name for h in logs]
    assert all(h.manifest().last_cleaning.now == NOW for h in logs)


def test_data_fault_still_marks_only_its_log(fleet, spark, capsys):
    _store, logs, base = fleet
    bad = logs[1]
    seg = bad.manifest().segments[0]
    path = Path(bad.path(seg.files[0].name))
    path.write_bytes(path.read_bytes()[:40])
    rc, out, err = cli_in_process(capsys, *base, "clean", "--all")
    assert rc == 1, err
    assert marked(logs) == [bad.name] and str(path) in bad.manifest().uncleanable.error
    assert sorted(r["log"] for r in json.loads(out) if r["cleaned"]) == sorted(h.name for h in logs if h is not bad)


def test_dagster_cleaning_with_spark_down_is_retryable_and_marks_nothing(fleet, tmp_path, monkeypatch):
    from compaction_assets.defs.assets import CleaningConfig, compacted_log
    from resources.log_store import LogStoreResource
    from resources.spark import make_spark_resource

    store, logs, base = fleet
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    resource = LogStoreResource(
        root=store.location,
        landing=str(tmp_path / "landing"),
        topics_file=base[3],
        latest_state_root=str(tmp_path / "latest"),
    )
    with dg.instance_for_test() as instance:
        context = dg.build_asset_context(partition_key=logs[0].name, instance=instance)
        with pytest.raises(dg.Failure) as failure:
            compacted_log(context, config=CleaningConfig(now_ms=NOW), log_store=resource, pyspark=make_spark_resource())
    assert failure.value.allow_retries is True
    assert "not marked" in failure.value.description and "unreachable" in failure.value.description
    assert marked(logs) == []


def test_engine_fault_classification_reads_the_whole_chain():
    try:
        try:
            raise ConnectionResetError("peer went away")
        except ConnectionResetError as inner:
            raise RuntimeError("stage failed") from inner
    except RuntimeError as exc:
        chained = exc
    assert faults.is_engine_fault(chained)
    assert faults.is_engine_fault(SparkSetupError("Spark did not start"))
    assert faults.is_engine_fault(RuntimeError("Job aborted: ExecutorLostFailure (executor 1 exited)"))
    assert faults.is_engine_fault(RuntimeError("java.lang.OutOfMemoryError: Java heap space"))
    assert not faults.is_engine_fault(RuntimeError("[CANNOT_READ_FILE_FOOTER] data/00000.parquet"))
    assert not faults.is_engine_fault(ValueError("invalid literal for int()"))


def test_engine_answers_a_live_session(spark):
    assert faults.engine_answers(spark)


def test_clear_uncleanable_all_and_the_operator_job(fleet, capsys, tmp_path):
    store, logs, base = fleet
    for h in logs[:3]:
        engine.mark_uncleanable(h, CompactionError(f"{h.name}: repaired since"))
    rc, out, err = cli_in_process(capsys, *base, "clear-uncleanable")
    assert rc == 1 and "--all" in err
    rc, out, err = cli_in_process(capsys, *base, "clear-uncleanable", "--all")
    assert rc == 0, err
    assert sorted(r["log"] for r in json.loads(out)) == [h.name for h in logs[:3]]
    assert marked(logs) == []
    # the Dagster operator job, every marked log at once
    from compaction_assets.defs.jobs import clear_uncleanable_logs_job
    from resources.log_store import LogStoreResource

    for h in logs[1:]:
        engine.mark_uncleanable(h, CompactionError("again"))
    resource = LogStoreResource(
        root=store.location,
        landing=str(tmp_path / "landing"),
        topics_file=base[3],
        latest_state_root=str(tmp_path / "latest"),
    )
    with dg.instance_for_test() as instance:
        result = clear_uncleanable_logs_job.execute_in_process(resources={"log_store": resource}, instance=instance)
    assert result.success
    assert marked(logs) == []
    meta = result.get_step_success_events()[0]  # the op's own step
    assert meta is not None


# ---------------------------------------------------------------------------------------------------
# a real Connect server stopped in the middle of a fleet cleaning
# ---------------------------------------------------------------------------------------------------


def _clean_all(tmp: Path, base: list[str], remote: str) -> subprocess.Popen:
    env = ch.driver_env(tmp, remote=remote, COMPACTION_CLEAN_CONCURRENCY="1")
    return subprocess.Popen(
        [ch.PYTHON, "-m", "compaction_assets", *base, "clean", "--all"],
        cwd=str(ch.ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(ch.java_missing_reason() is not None, reason=str(ch.java_missing_reason()))
def test_connect_server_stopped_mid_fleet_marks_nothing_and_next_run_cleans_all(tmp_path):
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    tf = load_topics(topics)
    logs = [make_log(store, f"many-{p}", tf.config_for("many"), records=200) for p in range(12)]
    base = ["--store", store.location, "--topics", str(topics), "--now", str(NOW)]
    server = ch.ConnectServer(tmp_path / "connect", master="local[2]")
    try:
        server.start()
        proc = _clean_all(tmp_path, base, server.url)
        cleaned_before_kill = 0
        for line in proc.stderr:  # the fleet's progress: stop the server once the first log is cleaned
            if ": cleaned (" in line:
                cleaned_before_kill += 1
                os.kill(server.server_pid(), signal.SIGKILL)  # as a crash or an OOM kill would
                break
        out, err = proc.communicate(timeout=600)
    finally:
        server.stop()
    assert cleaned_before_kill == 1
    assert proc.returncode == cli.EXIT_TRANSIENT, err[-3000:]
    assert marked(logs) == [], [h.manifest().uncleanable for h in logs]
    done = [h.name for h in logs if h.manifest().last_cleaning]
    assert 1 <= len(done) < len(logs), "the server was stopped after the fleet finished"
    assert "engine fault" in err and "Traceback" not in err
    # a new server (a restart): the next run cleans every log the first one did not
    again = ch.ConnectServer(tmp_path / "connect2", master="local[2]")
    try:
        again.start()
        proc = _clean_all(tmp_path, base, again.url)
        out, err = proc.communicate(timeout=600)
    finally:
        again.stop()
    assert proc.returncode == 0, err[-3000:]
    assert sorted(r["log"] for r in json.loads(out) if r["cleaned"]) == sorted(set(h.name for h in logs) - set(done))
    assert all(h.manifest().last_cleaning.now == NOW for h in logs) and marked(logs) == []
