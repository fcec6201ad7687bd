"""One alert per fault when a table catch-up meets a log's bad data: the catch-up (the one run that reads a
log with no cleaning attempt) marks the log uncleanable as a cleaning would, records the failure once for
the alert sensor and commits the topic's other logs; a run that finds the fault marked by another run
first (a catch-up after a cleaning, a cleaning beside a catch-up) fails without paging it again."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from compaction_assets.cleaning import engine, faults
from compaction_assets.defs.alerts import REPORTED_KEY, batch_failure_alerts, run_failure_alerts
from compaction_assets.defs.partitions import LOG_PARTITIONS
from compaction_assets.defs.table.freshness import table_catch_up_job
from compaction_assets.errors import AlreadyReportedError, CompactionError
from compaction_assets.log import writer
from tests.table.helpers import CFG, QUIET, table_state

OLD = 1_000_000_000  # appended long ago: the segments are sealed, each a file of its own


def _fleet(store) -> None:
    """users-0 good, users-1 with its first segment file cut in half."""
    for log in ("users-0", "users-1"):
        records = [{"key": f"k{i % 3}", "value": f"{log}-v{i}", "timestamp": 100 + i} for i in range(12)]
        writer.append(store.log(log), CFG, records, now=OLD)
    handle = store.log("users-1")
    path = Path(handle.path(handle.manifest().segments[0].files[0].name))
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _catch_up(resources, instance) -> dg.ExecuteInProcessResult:
    job = dg.Definitions(jobs=[table_catch_up_job], resources=resources).resolve_job_def(table_catch_up_job.name)
    config = {"ops": {"table_catch_up_op": {"config": {"logs": ["users-0", "users-1"]}}}}
    return job.execute_in_process(run_config={**QUIET, **config}, instance=instance, raise_on_error=False)


def _failure_context(instance, result) -> dg.RunFailureSensorContext:
    run = instance.get_run_by_id(result.run_id)
    [failure] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    return dg.build_run_status_sensor_context(
        sensor_name="run_failure_alert", dagster_instance=instance, dagster_run=run, dagster_event=failure
    ).for_run_failure()


def test_a_catch_up_marks_a_corrupt_log_pages_it_once_and_commits_the_others(env):
    _, store, resources, instance = env
    instance.add_dynamic_partitions(LOG_PARTITIONS, ["users-1"])
    _fleet(store.store)
    result = _catch_up(resources, instance)
    assert not result.success
    # the topic's good log is committed although its topic's other log cannot be read
    assert {k: v for k, (v, _) in table_state(store.handle("users-0")).items()} == {
        b"k0": b"users-0-v9",
        b"k1": b"users-0-v10",
        b"k2": b"users-0-v11",
    }
    mark = store.handle("users-1").manifest().uncleanable
    assert mark is not None and "log 'users-1': segment file" in mark.error and "Parquet" in mark.error
    [alert] = run_failure_alerts(_failure_context(instance, result))
    assert alert.log == "users-1" and alert.job == table_catch_up_job.name
    assert "is marked uncleanable" in alert.reason and "log 'users-1': segment file" in alert.reason
    # the next catch-up leaves the marked log out: it succeeds and pages nothing
    again = _catch_up(resources, instance)
    assert again.success
    [output] = [e for e in again.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert output.event_specific_data.metadata["left_out_marked"].value == "users-1"
    assert batch_failure_alerts(instance, instance.get_run_by_id(again.run_id), set()) == []


def test_the_first_run_to_mark_a_fault_reports_it_the_second_does_not(env):
    _, store, _, _ = env
    _fleet(store.store)
    handle = store.store.log("users-1")
    first, second = CompactionError("first: a bad page"), CompactionError("second: the same bad page")
    assert engine.mark_uncleanable(handle, first) is engine.Mark.MARKED
    assert engine.mark_uncleanable(handle, second) is engine.Mark.ALREADY
    assert "first: a bad page" in handle.manifest().uncleanable.error  # the first mark is kept
    error = faults.marked_error(handle, engine.Mark.ALREADY, "a bad page")
    assert isinstance(error, AlreadyReportedError) and "another run marked it uncleanable first" in str(error)
    assert not isinstance(faults.marked_error(handle, engine.Mark.MARKED, "x"), AlreadyReportedError)


def test_a_step_failure_another_run_reported_pages_nothing(env):
    _, _, _, instance = env

    @dg.op(config_schema={"reported": bool})
    def fails(context) -> None:
        reported = context.op_config["reported"]
        raise dg.Failure(
            description="log users-1 is marked uncleanable", metadata={REPORTED_KEY: True} if reported else {}
        )

    @dg.job
    def cleaning():
        fails()

    for reported, alerts in ((True, 0), (False, 1)):
        config = {**QUIET, "ops": {"fails": {"config": {"reported": reported}}}}
        result = cleaning.execute_in_process(run_config=config, instance=instance, raise_on_error=False)
        assert len(run_failure_alerts(_failure_context(instance, result))) == alerts, reported
