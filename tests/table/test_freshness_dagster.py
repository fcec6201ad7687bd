"""Dagster: the ingest run commits the topic's table (no cleaning needed), latest_state's metadata carries the
lag, and `table_freshness` fails, with one alert, once a partition's lag passes table.freshness.ms: the
sensor finds the late log from the manifests and the tables' marks and starts the check's run."""

from __future__ import annotations

import dagster as dg

from compaction_assets.cleaning import engine
from compaction_assets.definitions import defs
from compaction_assets.defs import clock
from compaction_assets.defs.alerts import failed_check_alerts
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.jobs import set_log_start_job
from compaction_assets.defs.table.freshness import (
    check_requests,
    table_catch_up_job,
    table_freshness,
    table_freshness_job,
    table_freshness_sensor,
)
from compaction_assets.errors import CompactionError
from compaction_assets.store.log_store import wall_ms
from compaction_assets.table.reading.lag import TableLag
from tests.table.helpers import QUIET, land, table_state


def materialize(assets, resources, instance):
    result = dg.materialize(assets, partition_key="users-0", resources=resources, instance=instance, run_config=QUIET)
    assert result.success
    return result


def sensor_runs(instance, resources, at_ms: int, job: str) -> list[dg.RunRequest]:
    """The runs of `job` the freshness sensor asks for at `at_ms`."""
    with (
        clock.frozen_at(at_ms),
        dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as ctx,
    ):
        return [r for r in table_freshness_sensor.evaluate_tick(ctx).run_requests or [] if r.job_name == job]


def late_runs(instance, resources, at_ms: int) -> list[dg.RunRequest]:
    return sensor_runs(instance, resources, at_ms, table_freshness_job.name)


def check_run(resources, instance, request: dg.RunRequest, at_ms: int) -> dg.ExecuteInProcessResult:
    """table_freshness_job as the sensor's `request` starts it, at `at_ms`."""
    job = dg.Definitions(
        assets=[raw_segments, cleanable_range, compacted_log, latest_state],
        asset_checks=[table_freshness],
        jobs=[table_freshness_job],
        resources=resources,
    ).resolve_job_def("table_freshness_job")
    with clock.frozen_at(at_ms):
        return job.execute_in_process(tags=request.tags, instance=instance, run_config=QUIET)


def test_the_ingest_run_commits_the_table_without_a_cleaning(env):
    tmp, store, resources, instance = env
    land(tmp / "landing", "a.jsonl", [{"key": "u1", "value": "v1", "timestamp": wall_ms()}])
    materialize([raw_segments], resources, instance)
    h = store.handle("users-0")
    assert {k: v for k, (v, _) in table_state(h).items()} == {b"u1": b"v1"}
    now = wall_ms()  # records of now: their segment stays active, so no cleaning is due below
    land(tmp / "landing", "b.jsonl", [{"key": "u1", "value": "v2", "timestamp": now}])
    materialize([raw_segments], resources, instance)
    assert {k: v for k, (v, _) in table_state(h).items()} == {b"u1": b"v2"}
    assert h.manifest().last_cleaning is None
    result = materialize([raw_segments, cleanable_range, compacted_log, latest_state], resources, instance)
    # a cleaning run commits after its cleaning, eligible or not (here not: every record is in the active segment)
    assert result.asset_materializations_for_node("compacted_log")[0].metadata["cleaned"].value is False
    meta = result.asset_materializations_for_node("latest_state")[0].metadata
    assert (meta["table_lag_records"].value, meta["table_lag_ms"].value, meta["table_freshness_ms"].value) == (
        0,
        0,
        60_000,
    )


def _behind(env, monkeypatch) -> int:
    """A table left behind its log by an ingestion with tables off; when the log changed (ms)."""
    tmp, store, resources, instance = env
    land(tmp / "landing", "a.jsonl", [{"key": "u1", "value": "v1", "timestamp": 1}])
    materialize([raw_segments], resources, instance)
    monkeypatch.setenv("COMPACTION_TABLES", "0")  # the next ingestion leaves the table behind
    land(
        tmp / "landing",
        "b.jsonl",
        [{"key": "u1", "value": "v2", "timestamp": 2}, {"key": "u2", "value": "x", "timestamp": 2}],
    )
    materialize([raw_segments], resources, instance)
    monkeypatch.delenv("COMPACTION_TABLES")
    return store.handle("users-0").manifest().committed_ms


def test_a_table_behind_for_half_its_bound_is_caught_up_by_the_sensor(env, monkeypatch):
    changed = _behind(env, monkeypatch)
    _, store, resources, instance = env
    assert sensor_runs(instance, resources, changed + 20_000, table_catch_up_job.name) == []
    [request] = sensor_runs(instance, resources, changed + 30_000, table_catch_up_job.name)
    assert request.run_config == {"ops": {"table_catch_up_op": {"config": {"logs": ["users-0"]}}}}
    assert late_runs(instance, resources, changed + 30_000) == []  # not late yet: no check, no page
    job = dg.Definitions(jobs=[table_catch_up_job], resources=resources).resolve_job_def(table_catch_up_job.name)
    result = job.execute_in_process(run_config={**QUIET, **request.run_config}, instance=instance, tags=request.tags)
    assert result.success
    assert {k: v for k, (v, _) in table_state(store.handle("users-0")).items()} == {b"u1": b"v2", b"u2": b"x"}
    assert sensor_runs(instance, resources, changed + 120_000, table_catch_up_job.name) == []
    assert late_runs(instance, resources, changed + 120_000) == []


def test_a_late_table_fails_its_freshness_check_and_pages_once(env, monkeypatch):
    changed = _behind(env, monkeypatch)
    _, _, resources, instance = env
    assert late_runs(instance, resources, changed + 30_000) == []  # within the bound
    [request] = late_runs(instance, resources, changed + 120_000)
    assert request.tags["dagster/partition"] == "users-0" and request.run_key.endswith(":users-0:2:1")
    result = check_run(resources, instance, request, changed + 120_000)
    [evaluation] = result.get_asset_check_evaluations()
    assert evaluation.check_name == "table_freshness" and not evaluation.passed
    assert evaluation.metadata["lag_records"].value == 2 and evaluation.metadata["lag_ms"].value == 120_000
    assert "past table.freshness.ms = 60000" in evaluation.description
    [alert] = failed_check_alerts(instance, instance.get_run_by_id(result.run_id))
    assert alert.check == "table_freshness" and alert.log == "users-0"
    materialize([raw_segments], resources, instance)  # nothing new to ingest: the table catches up
    assert late_runs(instance, resources, changed + 120_000) == []
    result = check_run(resources, instance, request, changed + 120_000)
    assert [e.passed for e in result.get_asset_check_evaluations()] == [True]


def test_a_log_marked_uncleanable_is_neither_caught_up_nor_paged_again(env, monkeypatch):
    """Its fault paged when it was marked; a catch-up or a check would fail on the same data and page twice.
    Cleared, the log is caught up and checked again."""
    changed = _behind(env, monkeypatch)
    _, store, resources, instance = env
    handle = store.handle("users-0")
    engine.mark_uncleanable(handle, CompactionError("segment data/x.parquet is corrupt"))
    assert sensor_runs(instance, resources, changed + 120_000, table_catch_up_job.name) == []
    assert late_runs(instance, resources, changed + 120_000) == []
    engine.clear_uncleanable(handle)
    assert len(sensor_runs(instance, resources, changed + 120_000, table_catch_up_job.name)) == 1
    assert len(late_runs(instance, resources, changed + 120_000)) == 1


def test_a_log_a_queued_run_will_commit_is_left_to_that_run(env, monkeypatch):
    """A cleaning queued for the log commits its table (or, its data bad, marks and pages it once): no
    catch-up races it, no check pages it again; once the run is done, the sensor takes the log again."""
    changed = _behind(env, monkeypatch)
    _, _, resources, instance = env
    queued = instance.create_run_for_job(  # made, not yet launched: in flight as a queued one is
        defs.resolve_job_def("compaction_job"), tags={"log": "users-0"}, status=dg.DagsterRunStatus.NOT_STARTED
    )
    assert sensor_runs(instance, resources, changed + 120_000, table_catch_up_job.name) == []
    assert late_runs(instance, resources, changed + 120_000) == []
    instance.report_run_canceled(queued)
    assert len(sensor_runs(instance, resources, changed + 120_000, table_catch_up_job.name)) == 1


def test_the_set_log_start_job_commits_the_table(env):
    tmp, store, resources, instance = env
    land(tmp / "landing", "a.jsonl", [{"key": k, "value": k.upper(), "timestamp": 1} for k in ("a", "b", "c")])
    materialize([raw_segments], resources, instance)
    config = {"log": "users-0", "offset": 2, "confirm": "users-0"}
    result = set_log_start_job.execute_in_process(
        run_config={**QUIET, "ops": {"set_log_start_op": {"config": config}}}, resources=resources, instance=instance
    )
    assert result.success
    assert {k: v for k, (v, _) in table_state(store.handle("users-0")).items()} == {b"c": b"C"}


def test_a_tick_asks_for_the_latest_logs_checks_first_and_at_most_its_cap():
    """10,000 late logs (a first deployment with no table yet) are not 10,000 runs in one tick: the most late
    first, up to the cap, the rest at the next ticks (their run keys unchanged, so none twice)."""
    lags = [TableLag(f"t-{i}", 3, None, 10, 60_000 + (i * 7919) % 10_000, 1_000) for i in range(10_000)]
    lags.append(TableLag("t-fresh", 3, 3, 0, 0, 1_000))  # not late: never checked
    runs = check_requests(lags, 100)
    assert len(runs) == 100
    chosen = [run.tags["log"] for run in runs]
    latest = sorted((lag for lag in lags if lag.late), key=lambda lag: (-lag.milliseconds, lag.log))[:100]
    assert chosen == [lag.log for lag in latest]
    assert len({run.run_key for run in runs}) == 100 and "t-fresh" not in chosen
    assert len(check_requests(lags, 20_000)) == 10_000
