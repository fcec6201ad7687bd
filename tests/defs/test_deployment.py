"""The deployment around the assets, on a real Dagster instance: configuration resolved at launch,
schedules evaluated and their runs executed, operator jobs, partition clean-up and run tags, the
sensors' injectable clock, and the Spark pool."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets.cleaning import engine
from compaction_assets.definitions import build_definitions, defs
from compaction_assets.defs import clock
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.automation.schedules import ScheduleSettings, build_schedules
from compaction_assets.defs.automation.sensors import (
    dirty_ratio_sensor,
    log_discovery_sensor,
    max_compaction_lag_sensor,
)
from compaction_assets.defs.batches.jobs import compaction_batch_job
from compaction_assets.defs.jobs import (
    SPARK_POOL,
    clear_uncleanable_job,
    gc_job,
    retention_job,
    set_checkpoint_job,
    set_log_start_job,
)
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.log import writer
from resources.log_store import LogStoreResource

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
NOW = 1_000_000_000  # every tick below evaluates at this time (clock.frozen_at), records are far older
TOPICS = (
    "defaults: {min.cleanable.dirty.ratio: 0.3, delete.retention.ms: 1000, segment.bytes: 4000}\n"
    "topics:\n"
    "  drop: {cleanup.policy: delete, retention.ms: 1000}\n"
    "  both: {cleanup.policy: 'compact,delete', retention.bytes: 4000}\n"
    "  laggy: {max.compaction.lag.ms: 1000, min.cleanable.dirty.ratio: 1.0}\n"
    "  young: {min.compaction.lag.ms: 100000000000}\n"
)


@pytest.fixture
def env(tmp_path):
    (tmp_path / "topics.yaml").write_text(TOPICS)
    log_store = LogStoreResource(
        root=str(tmp_path / "store"),
        landing=str(tmp_path / "landing"),
        topics_file=str(tmp_path / "topics.yaml"),
        latest_state_root=str(tmp_path / "latest"),
    )
    with dg.instance_for_test() as instance:
        yield log_store, instance


def fill(log_store, log, records=200, keys=None, ts=100):
    """Append `records` records (keys cycling over `keys`) to a log, in several segments."""
    keys = keys or records
    writer.append(
        log_store.handle(log),
        log_store.config_for(log),
        [{"key": f"k{i % keys}", "value": "x" * 40, "timestamp": ts + i} for i in range(records)],
        now=NOW,
    )
    return log_store.handle(log).manifest()


def failure_message(result) -> str:
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    return failure.event_specific_data.error.message.strip()


def schedule(name):
    return {s.name: s for s in build_schedules()}[name]


# --- configuration at launch ---------------------------------------------------------------------


def test_the_code_location_loads_with_nothing_set_and_a_malformed_setting_is_one_line():
    """No COMPACTION_* or SPARK_* variable: the location loads (nothing else is read at import); schedules,
    sensors and operator jobs are all there. A malformed variable fails the load in one line naming it
    (issue 20 refines issue 15 here: a bad deployment is told at once, not at its first run)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTION_", "SPARK_"))}
    code = (
        "import dagster as dg; from compaction_assets.definitions import defs; "
        "dg.Definitions.validate_loadable(defs); "
        "print(sorted(s.name for s in defs.schedules)); print(sorted(j.name for j in defs.jobs))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "['compaction_sweep_schedule', 'gc_schedule', 'retention_schedule']" in out.stdout
    for job in ("clear_uncleanable_job", "set_checkpoint_job", "set_log_start_job", "gc_job", "rebuild_latest_state"):
        assert job in out.stdout
    env["COMPACTION_LOCK_TTL_SECONDS"] = "not-a-number"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stderr.splitlines() if "CompactionError:" in ln]
    assert out.returncode != 0 and len(lines) == 1 and "COMPACTION_LOCK_TTL_SECONDS='not-a-number'" in lines[0]


def test_resources_resolve_the_environment_when_used(monkeypatch, tmp_path):
    resource = LogStoreResource()  # what the code location binds
    monkeypatch.setenv("COMPACTION_STORE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("COMPACTION_LANDING", str(tmp_path / "landed"))
    assert resource.store_location() == str(tmp_path / "elsewhere")
    assert resource.landing_area() == str(tmp_path / "landed")
    monkeypatch.setenv("COMPACTION_LOCK_TTL_SECONDS", "nope")
    with pytest.raises(Exception, match="COMPACTION_LOCK_TTL_SECONDS"):
        resource.store  # noqa: B018 (the malformed value is refused when a run needs it)


def test_a_partition_whose_log_does_not_exist_fails_with_one_line(env):
    log_store, instance = env
    instance.add_dynamic_partitions(log_partitions.name, ["ghost-0"])
    resources = {"log_store": log_store, "pyspark": LazyPySparkResource(spark_config={})}
    for asset in (raw_segments, cleanable_range, compacted_log, latest_state):
        result = dg.materialize(
            [asset],
            partition_key="ghost-0",
            resources=resources,
            instance=instance,
            run_config=QUIET,
            raise_on_error=False,
        )
        message = failure_message(result)
        assert "log 'ghost-0' does not exist" in message and "\n" not in message, (asset, message)
        assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]  # a refusal
    assert not log_store.handle("ghost-0").exists()  # nothing written


# --- schedules ---------------------------------------------------------------------------------------


def test_retention_schedule_applies_retention_to_delete_policy_logs(env):
    log_store, instance = env
    before = {log: fill(log_store, log) for log in ("drop-0", "both-0", "users-0")}
    assert all(len(m.segments) > 2 for m in before.values())
    instance.add_dynamic_partitions(log_partitions.name, list(before))
    with clock.frozen_at(NOW):
        request = (
            schedule("retention_schedule")
            .evaluate_tick(dg.build_schedule_context(instance=instance, resources={"log_store": log_store}))
            .run_requests[0]
        )
    assert request.run_config["ops"]["retention_op"]["config"] == {"logs": ["both-0", "drop-0"], "now_ms": NOW}
    result = retention_job.execute_in_process(
        run_config=request.run_config, instance=instance, resources={"log_store": log_store}, tags=request.tags
    )
    assert result.success
    after = {log: log_store.handle(log).manifest() for log in before}
    assert len(after["drop-0"].segments) == 1  # retention.ms: every sealed segment is past it
    assert after["drop-0"].log_start_offset == before["drop-0"].segments[-1].base_offset
    assert after["both-0"].total_size < before["both-0"].total_size  # retention.bytes
    assert after["users-0"] == before["users-0"]  # compact only: untouched
    figures = (
        result.output_for_node("retention_op") is None
        and [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"][0].event_specific_data.metadata
    )
    removed = (
        before["drop-0"].total_records
        - after["drop-0"].total_records
        + before["both-0"].total_records
        - after["both-0"].total_records
    )
    assert figures["retention_records"].value == removed > 0 and figures["retention_logs"].value == 2
    observed = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("compacted_log"), asset_partitions=["drop-0"]), limit=5
    ).records
    assert observed[0].asset_observation.metadata["observed_retention_removed_records"].value > 0
    with clock.frozen_at(NOW):  # nothing left to drop: the next tick skips
        again = schedule("retention_schedule").evaluate_tick(
            dg.build_schedule_context(instance=instance, resources={"log_store": log_store})
        )
    assert again.run_requests == [] and "no log" in again.skip_message


def test_gc_schedule_collects_leftovers(env):
    log_store, instance = env
    fill(log_store, "users-0", records=10)
    leftover = Path(log_store.handle("users-0").path("data/leftover-from-a-killed-append.parquet"))
    leftover.write_bytes(b"PAR1 half written")
    os.utime(leftover, (0, 0))  # older than any grace period
    request = (
        schedule("gc_schedule")
        .evaluate_tick(dg.build_schedule_context(instance=instance, resources={"log_store": log_store}))
        .run_requests[0]
    )
    result = gc_job.execute_in_process(
        run_config=request.run_config, instance=instance, resources={"log_store": log_store}
    )
    assert result.success and not leftover.exists()
    assert log_store.handle("users-0").manifest().total_records == 10


def test_sweep_schedule_starts_every_eligible_log_like_clean_all(env, spark):
    log_store, instance = env
    fill(log_store, "users-0", records=60, keys=3)  # dirty: eligible
    fill(log_store, "young-0", records=30)  # younger than min.compaction.lag.ms
    fill(log_store, "users-2", records=60, keys=3)  # dirty, but marked uncleanable
    fill(log_store, "drop-0", records=30)  # delete policy: retention via the run
    engine.mark_uncleanable(log_store.handle("users-2"), RuntimeError("segment data/x.parquet is corrupt"))
    instance.add_dynamic_partitions(log_partitions.name, ["users-0", "young-0", "users-2", "drop-0"])
    with clock.frozen_at(NOW):
        tick = schedule("compaction_sweep_schedule").evaluate_tick(
            dg.build_schedule_context(
                instance=instance, resources={"log_store": log_store}, repository_def=defs.get_repository_def()
            )
        )
    # one batch run (a schedule starts one job: the batch job), its logs in its config and its tags
    [request] = tick.run_requests
    assert request.job_name in (None, "compaction_batch_job")
    config = request.run_config["ops"]["compaction_batch_op"]["config"]
    assert sorted(config["logs"]) == ["drop-0", "users-0"] and config["now_ms"] == NOW
    assert request.tags["compaction/logs"] == "drop:0;users:0" and "topic" not in request.tags
    result = compaction_batch_job.execute_in_process(
        instance=instance,
        tags=request.tags,
        run_config={**QUIET, **request.run_config},
        resources={"log_store": log_store, "pyspark": LazyPySparkResource(spark_config={})},
    )
    assert result.success
    assert log_store.handle("users-0").manifest().total_records < 60
    assert {e.partition for e in result.get_asset_materialization_events()} == {"drop-0", "users-0"}


def test_schedule_cron_and_status_are_configurable():
    custom = {
        s.name: s
        for s in build_definitions(
            ScheduleSettings(gc_cron="0 3 * * *", sweep_status=dg.DefaultScheduleStatus.RUNNING)
        ).schedules
    }
    assert custom["gc_schedule"].cron_schedule == "0 3 * * *"
    assert custom["compaction_sweep_schedule"].default_status == dg.DefaultScheduleStatus.RUNNING
    default = {s.name: s for s in defs.schedules}
    assert default["compaction_sweep_schedule"].default_status == dg.DefaultScheduleStatus.STOPPED
    assert default["retention_schedule"].default_status == dg.DefaultScheduleStatus.RUNNING


# --- operator jobs -------------------------------------------------------------------------------


def operate(job, instance, log_store, config):
    return job.execute_in_process(
        run_config={"ops": {job.graph.node_defs[0].name: {"config": config}}},
        instance=instance,
        resources={"log_store": log_store},
        raise_on_error=False,
    )


def test_operator_jobs_repair_a_log(env):
    log_store, instance = env
    fill(log_store, "users-0", records=40)
    handle = log_store.handle("users-0")
    engine.mark_uncleanable(handle, RuntimeError("segment data/x.parquet is corrupt"))
    assert handle.manifest().uncleanable

    assert operate(clear_uncleanable_job, instance, log_store, {"log": "users-0"}).success
    assert handle.manifest().uncleanable is None

    assert operate(set_checkpoint_job, instance, log_store, {"log": "users-0", "offset": 7}).success
    assert handle.manifest().checkpoint == 7

    refused = operate(set_log_start_job, instance, log_store, {"log": "users-0", "offset": 20})
    assert not refused.success and "set confirm to 'users-0'" in failure_message(refused)
    assert handle.manifest().log_start_offset == 0  # nothing moved without the confirmation
    moved = operate(set_log_start_job, instance, log_store, {"log": "users-0", "offset": 20, "confirm": "users-0"})
    assert moved.success and handle.manifest().log_start_offset == 20

    beyond = operate(set_log_start_job, instance, log_store, {"log": "users-0", "offset": 999, "confirm": "users-0"})
    message = failure_message(beyond)
    assert "beyond the log end offset 40" in message and "\n" not in message
    assert not [e for e in beyond.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]

    ghost = operate(clear_uncleanable_job, instance, log_store, {"log": "ghost-0"})
    assert "no log 'ghost-0'" in failure_message(ghost)


def test_rebuild_latest_state_is_the_latest_state_asset():
    job = defs.resolve_job_def("rebuild_latest_state")
    assert job.partitions_def == log_partitions
    # the table check (defs/checks.py) runs after the rebuild, as after every latest_state
    assert sorted(n.name for n in job.graph.nodes) == ["latest_state", "latest_state_table_matches_latest_state"]


# --- sensors: clock, partitions of removed logs, tags; the Spark pool ------------------------------


def test_deadlines_move_with_the_frozen_clock_not_with_sleep(env):
    log_store, instance = env
    fill(log_store, "laggy-0", records=5, ts=NOW)
    instance.add_dynamic_partitions(log_partitions.name, ["laggy-0"])

    def tick():
        with dg.build_sensor_context(
            instance_ref=instance.get_ref(), resources={"log_store": log_store}, definitions=defs
        ) as ctx:
            return max_compaction_lag_sensor.evaluate_tick(ctx).run_requests

    with clock.frozen_at(NOW + 10):  # 10 ms after the records: not due (max.compaction.lag.ms 1000)
        assert tick() == []
    with clock.frozen_at(NOW + 5_000):  # past the deadline
        [request] = tick()
    assert request.tags["reason"] == "max_compaction_lag" and request.tags["topic"] == "laggy"


def test_discovery_deletes_partitions_of_logs_that_are_gone(env):
    log_store, instance = env
    fill(log_store, "users-0", records=3)
    instance.add_dynamic_partitions(log_partitions.name, ["users-0", "removed-0"])
    with dg.build_sensor_context(
        instance_ref=instance.get_ref(), resources={"log_store": log_store}, definitions=defs
    ) as ctx:
        result = log_discovery_sensor.evaluate_tick(ctx)
    deletes = [r for r in result.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert [list(r.partition_keys) for r in deletes] == [["removed-0"]]


def test_200_due_logs_queue_behind_the_spark_pool(env):
    """One tick over 200 due logs asks for one batch run (not 200 runs), whose cleaning step is in the
    pool, as every Spark step of compaction_job is, so the instance's pool limit bounds how many run at
    once (measured in test_pool_limit_*)."""
    log_store, instance = env
    logs = [f"users-{p}" for p in range(200)]
    for log in logs:
        fill(log_store, log, records=6, keys=2)
    instance.add_dynamic_partitions(log_partitions.name, logs)
    with (
        clock.frozen_at(NOW),
        dg.build_sensor_context(
            instance_ref=instance.get_ref(), resources={"log_store": log_store}, definitions=defs
        ) as ctx,
    ):
        requests = dirty_ratio_sensor.evaluate_tick(ctx).run_requests
    [batch] = requests  # 200 small logs fit one batch (defs/batches/requests.py bounds logs and bytes)
    assert batch.job_name == "compaction_batch_job" and batch.tags["compaction/logs"] == "users:0-199"
    assert [n.definition.pool for n in defs.resolve_job_def("compaction_batch_job").graph.nodes] == [SPARK_POOL]
    job = defs.resolve_job_def("compaction_job")
    spark_steps = {n.name: n.definition.pool for n in job.graph.nodes}
    # the checks read the log with pyarrow in the step, no Spark: they need no place in the pool
    assert spark_steps == {
        "cleanable_range": SPARK_POOL,
        "compacted_log": SPARK_POOL,
        "latest_state": SPARK_POOL,
        "compacted_log_checks": None,
        "latest_state_table_matches_latest_state": None,
    }
