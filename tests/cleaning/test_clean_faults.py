"""Cleaning under faults (SPEC §5: one cleaning at a time; a failed cleaning leaves the log as it was and
marks it uncleanable until its next success or an operator clears it):

- two `python -m compaction_assets clean` started at once on one log: one cleans, the other exits
  non-zero naming the lock and its holder; the lease of a SIGKILLed cleaner is taken over once it
  expires (COMPACTION_LOCK_TTL_SECONDS);
- a missing, truncated or garbage segment file: the cleaning fails naming the file, the log is marked
  uncleanable with that error, `uncleanable-partitions-count` / `uncleanable-bytes` show it (CLI
  `metrics`, `logs`, and the dirty-ratio sensor's observations in Dagster), the other logs of the same
  `clean --all` and sensor tick are cleaned, and after the repair `clear-uncleanable` + a cleaning work.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets import cli
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import evaluate_logs, figures
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.errors import CompactionError
from compaction_assets.log import reader, writer
from compaction_assets.log.reader import iter_records
from compaction_assets.planning.planner import evaluate
from compaction_assets.store.log_store import LogStore, wall_ms
from compaction_assets.topics.config import load_topics
from resources.log_store import LogStoreResource
from tests.log.test_store_faults import check_layout, referenced_files_exist, wait_lease_expiry

REPO = Path(__file__).resolve().parents[2]
TOPICS = "defaults: {min.cleanable.dirty.ratio: 0.01, delete.retention.ms: 1000}\n"
NOW = 10_000_000


def make_log(store: LogStore, name: str, config, seed: int = 0):
    """Two sealed segments with superseded records and a tombstone: eligible for a cleaning."""
    h = store.log(name)
    writer.append(
        h, config, [{"key": f"k{i % 7}", "value": f"{name}-{seed}-{i}", "timestamp": 100 + i} for i in range(40)]
    )
    writer.roll(h)
    writer.append(
        h,
        config,
        [{"key": f"k{i % 5}", "value": None if i == 3 else f"late-{i}", "timestamp": 200 + i} for i in range(10)],
    )
    writer.roll(h)
    return h


def latest(h) -> dict:
    """SPEC §7.5 for the offset strategy, from the records (no Spark): per key its last record, deletes out."""
    state: dict = {}
    for r in iter_records(h):
        state[r.key] = (r.offset, r.value)
    return {k: v for k, v in state.items() if v[1] is not None}


def run_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "compaction_assets", *args],
        cwd=str(REPO),
        env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def cli_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """The real CLI in this process (it reuses the test session's Spark): (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


@pytest.fixture
def env(tmp_path):
    topics = tmp_path / "topics.yaml"
    topics.write_text(TOPICS)
    store = LogStore(str(tmp_path / "store"), gc_grace_s=0)
    return tmp_path, store, str(topics), load_topics(topics)


# =========================================================================================================
# one cleaning at a time
# =========================================================================================================


def test_two_cleanings_at_once_one_runs_other_refused_naming_lock_and_holder(env):
    _tmp, store, topics, tf = env
    h = make_log(store, "orders-0", tf.config_for("orders"))
    before = check_layout(h, h.manifest())
    state = latest(h)
    args = ("--store", store.location, "--topics", topics, "--now", str(NOW), "clean", "orders-0")
    # The winner is held under its lease until the other has been refused, whatever its speed (a cleaning
    # of 50 records ends in milliseconds): the append lease's file, which only a holder of the cleaning
    # lease reads (its garbage collection keeps what an append in flight wrote), is a named pipe that
    # nobody writes until then; it then reads no append lease there.
    append_lease = Path(h.path("_locks/append.lock"))
    append_lease.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(append_lease)
    procs = [run_cli(*args, env={"COMPACTION_LOCK_TTL_SECONDS": "10"}) for _ in range(2)]
    try:
        deadline = time.monotonic() + 120
        while h.lock_holder("clean") is None or all(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, (
                "no cleaner held the lease, or none was refused",
                [p.poll() for p in procs],
            )
            time.sleep(0.02)
        with open(append_lease, "wb"):  # the held reader has it open: this returns at once, and closing
            append_lease.unlink()  # it gives that reader an empty file (no lease)
        results = [(p, *p.communicate(timeout=300)) for p in procs]
    finally:
        for p in procs:
            kill_group(p)
        append_lease.unlink(missing_ok=True)
    winners = [r for r in results if r[0].returncode == 0]
    losers = [r for r in results if r[0].returncode != 0]
    assert len(winners) == 1 and len(losers) == 1, [(p.returncode, e[-500:]) for p, _, e in results]
    (wp, wout, _), (_, _, lerr) = winners[0], losers[0]
    assert json.loads(wout)[0]["cleaned"] is True
    errors = [line for line in lerr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, lerr
    msg = errors[0]
    assert "orders-0" in msg and "locked for clean" in msg
    assert h.path("_locks/clean.lock") in msg  # the lock, by its file
    assert f"pid {wp.pid} " in msg  # and its holder
    assert "Traceback" not in lerr
    # the log went through exactly one cleaning
    m = h.manifest()
    assert m.last_cleaning.now == NOW and m.uncleanable is None and h.lock_holder("clean") is None
    after = check_layout(h, m)
    assert len(after) < len(before) and {r.offset for r in after} <= {r.offset for r in before}
    assert latest(h) == state


def test_lease_of_a_killed_cleaner_is_taken_over_after_expiry(env, spark, capsys):
    _tmp, store, topics, tf = env
    h = make_log(store, "orders-1", tf.config_for("orders"))
    before = latest(h)
    # The cleaner is held inside its lock, whatever its speed: a segment file is a named pipe that nobody
    # writes, so its read blocks (a cleaning of 50 records takes less than the wait's polling interval).
    segment_file = Path(h.path(h.manifest().segments[0].files[0].name))
    kept_aside = segment_file.with_name(segment_file.name + ".aside")
    segment_file.rename(kept_aside)
    os.mkfifo(segment_file)
    proc = run_cli(
        "--store",
        store.location,
        "--topics",
        topics,
        "clean",
        "orders-1",
        "--force",
        env={"COMPACTION_LOCK_TTL_SECONDS": "6"},
    )
    try:
        deadline = time.monotonic() + 120
        while getattr(h.lock_holder("clean"), "pid", None) != proc.pid:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the cleaner never took the lock"
            time.sleep(0.02)
    finally:
        kill_group(proc)  # SIGKILL: the lease stays behind
        segment_file.unlink()
        kept_aside.rename(segment_file)
    holder = h.lock_holder("clean")
    assert holder.pid == proc.pid
    args = ("--store", store.location, "--topics", topics, "clean", "orders-1", "--force")
    # the lease was renewed every 2 s (a third of its 6 s), so 4 s at least are left of it: room for the
    # CLI in this process even on a loaded machine; refused always, never skipped
    assert holder.expires_ms > wall_ms(), "the dead lease expired before the CLI could be refused"
    rc, _, err = cli_in_process(capsys, *args)
    assert rc == 1
    assert f"pid {proc.pid} " in err and h.path("_locks/clean.lock") in err and "expires in" in err
    wait_lease_expiry(h, "clean")
    rc, out, err = cli_in_process(capsys, *args)
    assert rc == 0, err
    assert json.loads(out)[0]["cleaned"] is True
    assert h.lock_holder("clean") is None
    assert latest(h) == before
    referenced_files_exist(h)


@pytest.mark.parametrize("value", ["0", "-1", "abc", "inf", "nan"])
def test_lock_ttl_environment_variable_is_validated(value, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("COMPACTION_LOCK_TTL_SECONDS", value)
    rc, _, err = cli_in_process(capsys, "--store", str(tmp_path / "s"), "logs")
    assert rc == 1 and err.count("\n") == 1
    assert "COMPACTION_LOCK_TTL_SECONDS" in err and repr(value) in err
    assert not (tmp_path / "s").exists()


# =========================================================================================================
# a corrupt or missing segment file
# =========================================================================================================


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garbage(path: Path) -> None:
    path.write_bytes(os.urandom(path.stat().st_size))


def _missing(path: Path) -> None:
    path.unlink()


def _corrupt_pages(path: Path) -> None:
    """Footer intact, data pages overwritten: only reading the data finds it (Spark fails first)."""
    import pyarrow.parquet as pq

    chunk = pq.read_metadata(path).row_group(0).column(1)  # the key column's pages
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    for at in range(start, start + chunk.total_compressed_size):
        data[at] = 0xAB
    path.write_bytes(bytes(data))
    pq.read_metadata(path)  # the footer still reads


DAMAGES = {"truncated": _truncate, "garbage": _garbage, "missing": _missing, "corrupt-pages": _corrupt_pages}
# how each is found: the footers are checked before Spark starts; a corrupt page only by reading the file
FOUND_BY = {
    "truncated": "is not a readable Parquet file",
    "garbage": "is not a readable Parquet file",
    "missing": "is missing",
    "corrupt-pages": "cannot be read",
}


def first_file(h) -> Path:
    return Path(h.path(h.manifest().segments[0].files[0].name))


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_damaged_segment_file_fails_the_cleaning_naming_it_and_marks_the_log(env, spark, damage):
    _tmp, store, _topics, tf = env
    cfg = tf.config_for("pay")
    h = make_log(store, "pay-0", cfg)
    path = first_file(h)
    original = path.read_bytes()
    DAMAGES[damage](path)
    before = h.manifest()
    with pytest.raises(CompactionError) as info:
        engine.run(h, cfg, NOW, spark=spark)
    msg = str(info.value)
    assert "\n" not in msg
    assert str(path) in msg and FOUND_BY[damage] in msg, msg  # names the file
    assert "pay-0" in msg and "uncleanable" in msg
    m = h.manifest()
    assert m.uncleanable and str(path) in m.uncleanable.error
    assert m.segments == before.segments and m.log_end_offset == before.log_end_offset  # unchanged
    assert m.checkpoint == before.checkpoint and m.last_cleaning is None
    figs = figures(evaluate_logs(store, tf.config_for, NOW))
    assert figs.uncleanable_partitions_count == 1
    assert figs.uncleanable_bytes == evaluate(m, cfg, NOW).cleanable_bytes > 0
    assert figs.uncleanable_logs[0].log == "pay-0" and str(path) in figs.uncleanable_logs[0].error
    # repaired and cleared (the cleaning after a repair: test_uncleanable_log_in_clean_all_metrics_and_dagster)
    path.write_bytes(original)
    reader.check_files(h, h.manifest())
    engine.clear_uncleanable(h)
    assert h.manifest().uncleanable is None
    assert figures(evaluate_logs(store, tf.config_for, NOW)).uncleanable_partitions_count == 0


def test_uncleanable_log_in_clean_all_metrics_and_dagster(env, spark, capsys):
    tmp, store, topics, tf = env
    good = [make_log(store, f"good-{p}", tf.config_for("good"), seed=p) for p in (0, 1)]
    bad = make_log(store, "bad-0", tf.config_for("bad"))
    latest_good = [latest(g) for g in good]
    latest_bad = latest(bad)
    path = first_file(bad)
    original = path.read_bytes()
    _truncate(path)
    bad_before = bad.manifest()
    base = ("--store", store.location, "--topics", topics, "--now", str(NOW))

    # one `clean --all`: the bad log fails with one line naming the file, the others are cleaned
    rc, out, err = cli_in_process(capsys, *base, "clean", "--all")
    assert rc == 1
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "bad-0" in errors[0] and str(path) in errors[0], err
    assert sorted(r["log"] for r in json.loads(out) if r["cleaned"]) == ["good-0", "good-1"]
    for g, state in zip(good, latest_good):
        assert g.manifest().last_cleaning.now == NOW and latest(g) == state
    m = bad.manifest()
    assert str(path) in m.uncleanable.error and m.segments == bad_before.segments
    stuck_bytes = evaluate(m, tf.config_for("bad"), NOW).cleanable_bytes
    assert stuck_bytes > 0

    # the figures, from the command line (a real process: no Spark needed)
    proc = run_cli(*base, "metrics")
    mout, merr = proc.communicate(timeout=120)
    assert proc.returncode == 0, merr
    figs = json.loads(mout)
    assert figs["uncleanable-partitions-count"] == 1 and figs["uncleanable-bytes"] == stuck_bytes
    assert figs["uncleanable-logs"][0]["log"] == "bad-0" and str(path) in figs["uncleanable-logs"][0]["error"]
    rc, out, _ = cli_in_process(capsys, *base, "logs")
    rows = {r["log"]: r for r in json.loads(out)}
    assert rows["bad-0"]["uncleanable"] is True and str(path) in rows["bad-0"]["uncleanable_error"]
    assert rows["good-0"]["uncleanable"] is False

    # a second `clean --all` skips it (and says so) without touching it
    rc, out, err = cli_in_process(capsys, *base, "clean", "--all")
    assert rc == 0, err
    assert "bad-0: skipped, marked uncleanable" in err and "clear-uncleanable bad-0" in err
    assert json.loads(out) == []
    assert bad.manifest().version == m.version

    # Dagster: the sensor tick requests the good logs only and records the figures as observations
    for g in good:
        writer.append(g, tf.config_for("good"), [{"key": "k2", "value": "more", "timestamp": 400}])
        writer.roll(g)
    from compaction_assets.definitions import defs
    from compaction_assets.defs.automation.sensors import dirty_ratio_sensor
    from tests.defs.test_dagster import materialize

    resource = LogStoreResource(
        root=store.location, landing=str(tmp / "landing"), topics_file=topics, latest_state_root=str(tmp / "latest")
    )
    resources = {"log_store": resource, "pyspark": LazyPySparkResource(spark_config={})}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, ["bad-0", "good-0", "good-1"])
        with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx:
            tick = dirty_ratio_sensor.evaluate_tick(ctx)
        assert sorted(r.partition_key for r in tick.run_requests) == ["good-0", "good-1"]
        store_obs = [e for e in tick.asset_events if e.partition is None]
        assert len(store_obs) == 1
        meta = store_obs[0].metadata
        assert meta["uncleanable-partitions-count"].value == 1
        assert (
            meta["uncleanable-bytes"].value == evaluate(bad.manifest(), tf.config_for("bad"), wall_ms()).cleanable_bytes
        )
        assert str(path) in json.dumps(meta["uncleanable_logs"].value)
        bad_obs = [e for e in tick.asset_events if e.partition == "bad-0"][0]
        assert bad_obs.metadata["observed_uncleanable"].value is True
        assert str(path) in bad_obs.metadata["observed_uncleanable_error"].value
        for event in tick.asset_events:  # as the sensor daemon records them; then read back
            instance.report_runless_asset_event(event)
        recorded = instance.fetch_observations(dg.AssetKey("compacted_log"), limit=20).records
        assert any(
            r.asset_observation.metadata.get("uncleanable-partitions-count") == dg.IntMetadataValue(1) for r in recorded
        )
        # the same tick again: unchanged figures are not recorded twice
        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), resources=resources, definitions=defs, cursor=tick.cursor
        ) as ctx:
            again = dirty_ratio_sensor.evaluate_tick(ctx)
        assert not [e for e in again.asset_events if e.partition is None]

        # a manual run of the cleaning job on the bad partition fails, naming the file
        from compaction_assets.defs.assets import cleanable_range, compacted_log

        result = materialize([cleanable_range, compacted_log], "bad-0", resources, instance, raise_on_error=False)
        assert not result.success
        failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
        assert str(path) in failure.event_specific_data.error.message

    # repaired: the operator clears the mark, the next cleaning succeeds
    path.write_bytes(original)
    rc, out, _ = cli_in_process(capsys, *base, "clear-uncleanable", "bad-0")
    assert rc == 0 and json.loads(out)["uncleanable"] is None
    rc, out, _ = cli_in_process(capsys, *base, "metrics")
    assert json.loads(out)["uncleanable-partitions-count"] == 0 and json.loads(out)["uncleanable-bytes"] == 0
    rc, out, err = cli_in_process(capsys, *base, "clean", "bad-0")
    assert rc == 0, err
    assert json.loads(out)[0]["cleaned"] is True
    assert latest(bad) == latest_bad
    check_layout(bad, bad.manifest())


def test_an_unreadable_manifest_does_not_stop_clean_all(env, spark, capsys):
    _tmp, store, topics, tf = env
    good = make_log(store, "good-0", tf.config_for("good"))
    broken = make_log(store, "broken-0", tf.config_for("broken"))
    for name in os.listdir(broken.path("_log")):
        Path(broken.path(f"_log/{name}")).write_bytes(b"{not json")
    rc, out, err = cli_in_process(
        capsys, "--store", store.location, "--topics", topics, "--now", str(NOW), "clean", "--all"
    )
    assert rc == 1
    assert [r["log"] for r in json.loads(out)] == ["good-0"] and good.manifest().last_cleaning
    assert "broken-0" in err and "no readable manifest" in err
    figs = figures(evaluate_logs(store, tf.config_for, NOW))
    assert figs.uncleanable_partitions_count == 1
    assert figs.uncleanable_logs[0].log == "broken-0"
