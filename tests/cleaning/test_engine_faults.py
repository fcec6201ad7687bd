"""Engine faults fail the run and never mark a log; only the log's own data marks it (Kafka's uncleanable
partitions are about the log, not the machine).

- a Spark master that does not exist and a Connect endpoint that refuses connections: `clean --all` exits
  75 (transient), every log stays unmarked, and the next run with Spark back cleans them all;
- Dagster's `compacted_log` with a Spark that cannot start fails as retryable and marks nothing;
- a real Spark Connect server killed in the middle of a fleet cleaning: nothing is marked, the run exits
  75, and a run against a new server cleans every log;
- `clear-uncleanable --all` and the operator job for several logs clear every mark at once;
- a fault that reads as the engine's (out of memory) repeated on one log while the others clean marks that
  log at the third, and the other logs of its fleets go on; the same fault on every log marks none.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import dagster as dg
import pytest

from compaction_assets import cli
from compaction_assets.cleaning import engine, faults
from compaction_assets.cleaning.layout import rewrite_plan
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.errors import CompactionError, EngineError, SparkSetupError, SuspectEngineFault
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
    # ... of which a lost connection cannot be the log's data, running out of memory can
    assert faults.log_suspect_marker(chained) is None
    assert faults.log_suspect_marker(RuntimeError("o1.x\n: java.lang.OutOfMemoryError: Java heap space")) == (
        "OutOfMemoryError"
    )
    assert faults.log_suspect_marker(MemoryError()) == "MemoryError"
    assert not faults.is_engine_fault(RuntimeError("[CANNOT_READ_FILE_FOOTER] data/00000.parquet"))
    assert not faults.is_engine_fault(ValueError("invalid literal for int()"))


def out_of_memory_from(records_read: int) -> CleanerTuning:
    """The product's tuning, but a cleaning of at least `records_read` records fails after its decision
    with the error Spark raises when one huge record runs it out of memory; the session stays up."""

    def plan(decision, tuning):
        if decision.stats.records_read >= records_read:
            raise RuntimeError(
                "An error occurred while calling o4180.collectToPython.\n: java.lang.OutOfMemoryError: Java heap space"
            )
        return rewrite_plan(decision, tuning)

    return replace(DEFAULT_TUNING, rewrite_plan=plan)


def test_an_engine_fault_repeated_on_one_log_while_others_clean_marks_that_log(tmp_path, spark):
    """Kafka marks a partition whose cleaning throws. An out-of-memory error reads as the engine's, so one
    fault only fails the run; the third in a row on the same log, with the other logs cleaned between
    each two, is the log's own and marks it. The fleets go on past it: the engine answers."""
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    config = load_topics_text(tmp_path, TOPICS).config_for("oom")
    huge = make_log(store, "oom-0", config, records=300)  # first in every fleet; its range is 310 records
    others = [make_log(store, f"oom-{p}", config) for p in (1, 2, 3)]  # 50 records each
    tuning = out_of_memory_from(300)
    for strike in (1, 2, 3):
        results = engine.run_many([(h, config) for h in [huge, *others]], NOW, spark=spark, force=True, tuning=tuning)
        assert [r.report is not None and r.report.cleaned for r in results[1:]] == [True] * 3, results
        error = results[0].error
        counted = huge.manifest().engine_faults
        if strike < 3:
            assert isinstance(error, SuspectEngineFault) and huge.manifest().uncleanable is None, error
            assert f"strike {strike} of 3" in str(error) and "OutOfMemoryError" in str(error)
            assert counted is not None and (counted.strikes, counted.faults) == (strike, strike)
        else:
            assert not isinstance(error, EngineError) and "marked uncleanable" in str(error), error
            mark = huge.manifest().uncleanable
            assert mark is not None and "3 cleanings in a row" in mark.error and "OutOfMemoryError" in mark.error
            assert counted is None  # the mark replaces the count; clearing it starts again from nothing
    assert marked(others) == [] and all(h.manifest().engine_faults is None for h in others)
    engine.clear_uncleanable(huge)
    assert huge.manifest().uncleanable is None and huge.manifest().engine_faults is None
    assert engine.run(huge, config, NOW, spark=spark, force=True).cleaned  # without the fault, it cleans


def test_the_same_engine_fault_on_every_log_marks_none(tmp_path, spark):
    """A machine short of memory fails every cleaning: no log cleans between two faults of another, so
    each counts one strike however often it fails, and none is marked."""
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    config = load_topics_text(tmp_path, TOPICS).config_for("oom")
    logs = [make_log(store, f"oom-{p}", config) for p in range(3)]
    for _ in range(4):
        results = engine.run_many(
            [(h, config) for h in logs], NOW, spark=spark, force=True, tuning=out_of_memory_from(1)
        )
        assert all(isinstance(r.error, SuspectEngineFault) for r in results), results
    assert marked(logs) == []
    assert [(h.manifest().engine_faults.strikes, h.manifest().engine_faults.faults) for h in logs] == [(1, 4)] * 3


def load_topics_text(tmp_path: Path, text: str):
    topics = tmp_path / "topics.yaml"
    topics.write_text(text)
    return load_topics(topics)


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
    [output] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]  # the op's own output
    meta = {k: v.value for k, v in output.event_specific_data.metadata.items()}
    assert meta == {
        "logs_cleared": 3,
        "cleared": {h.name: "CompactionError: again" for h in logs[1:]},
        "failed": [],
    }


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


@pytest.mark.skipif(ch.java_skip(), reason=str(ch.java_missing_reason()))  # under CI=true: runs, and fails
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
