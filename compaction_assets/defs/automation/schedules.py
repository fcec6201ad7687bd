"""Schedules, for what no sensor triggers and for deployments that turn sensors off:

- retention_schedule: SPEC §6 retention for every log whose cleanup.policy includes delete (a
  delete-only topic is never eligible for compaction, so no sensor ever runs it); one run, requested only
  when some log has a segment to drop; its figures are the run's metadata and an observation per log.
- gc_schedule: garbage collection (files left by interrupted changes) across the store, one run.
- compaction_sweep_schedule: compaction_batch_job runs over the eligible logs, highest dirty ratio first
  (the CLI's `clean --all` as a few runs; logs marked uncleanable are skipped); stopped by default,
  since the sensors do the same when they run.

Cron and default status come from `ScheduleSettings` (`build_schedules(ScheduleSettings(...))`);
every schedule evaluates at `clock.now_ms()`, which tests set.
"""

from dataclasses import dataclass

import dagster as dg

from compaction_assets.cleaning.engine import retention_cut
from compaction_assets.cleaning.metrics import evaluate_read
from compaction_assets.defs.automation.sensors import cleaning_requests
from compaction_assets.defs.batches.jobs import compaction_batch_job
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.jobs import delete_policy_logs, gc_job, retention_job
from compaction_assets.defs.partitions import LOG_PARTITIONS
from compaction_assets.errors import CompactionError
from compaction_assets.planning.planner import order
from resources.log_store import LogStoreResource

RUNNING = dg.DefaultScheduleStatus.RUNNING
STOPPED = dg.DefaultScheduleStatus.STOPPED


@dataclass(frozen=True)
class ScheduleSettings:
    """Cron (in `timezone`) and default status of each schedule."""

    retention_cron: str = "*/15 * * * *"
    retention_status: dg.DefaultScheduleStatus = RUNNING
    gc_cron: str = "17 * * * *"
    gc_status: dg.DefaultScheduleStatus = RUNNING
    sweep_cron: str = "*/10 * * * *"
    sweep_status: dg.DefaultScheduleStatus = STOPPED
    timezone: str = "UTC"


def logs_due_for_retention(log_store: LogStoreResource, now: int, log=None) -> list[str]:
    """Delete-policy logs with at least one segment past retention.ms or beyond retention.bytes."""
    due, config_for = [], log_store.config_per_topic()
    for name in delete_policy_logs(log_store):
        try:
            manifest = log_store.handle(name).manifest()
        except CompactionError as exc:
            if log:
                log.warning(f"{name}: cannot evaluate retention: {exc}")
            continue
        if retention_cut(list(manifest.segments), config_for(name), now):
            due.append(name)
    return due


DEFAULT_SCHEDULE_SETTINGS = ScheduleSettings()


def build_schedules(config: ScheduleSettings = DEFAULT_SCHEDULE_SETTINGS) -> list[dg.ScheduleDefinition]:
    """The three schedules with the given cron and default status."""
    return [_retention_schedule(config), _gc_schedule(config), _compaction_sweep_schedule(config)]


def _retention_schedule(config: ScheduleSettings) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="retention_schedule",
        job=retention_job,
        cron_schedule=config.retention_cron,
        default_status=config.retention_status,
        execution_timezone=config.timezone,
    )
    def retention_schedule(context: dg.ScheduleEvaluationContext, log_store: LogStoreResource):
        """One retention run over the delete-policy logs that have something to drop."""
        now = now_ms()
        due = logs_due_for_retention(log_store, now, context.log)
        if not due:
            return dg.SkipReason("no log whose cleanup.policy includes delete has a segment to drop")
        return dg.RunRequest(
            run_key=f"retention:{now}",
            tags={"logs": str(len(due))},
            run_config={"ops": {"retention_op": {"config": {"logs": due, "now_ms": now}}}},
        )

    return retention_schedule


def _gc_schedule(config: ScheduleSettings) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="gc_schedule",
        job=gc_job,
        cron_schedule=config.gc_cron,
        default_status=config.gc_status,
        execution_timezone=config.timezone,
    )
    def gc_schedule(context: dg.ScheduleEvaluationContext, log_store: LogStoreResource):
        """One garbage collection run over every log of the store."""
        if not log_store.store.logs():
            return dg.SkipReason("the store has no logs")
        return dg.RunRequest(run_key=f"gc:{now_ms()}", run_config={"ops": {"gc_op": {"config": {"logs": []}}}})

    return gc_schedule


def _compaction_sweep_schedule(config: ScheduleSettings) -> dg.ScheduleDefinition:
    # A schedule starts one job: the sweep's is the batch job (a batch of one log records what a
    # compaction_job run records), so a sweep of a fleet is a few runs.
    @dg.schedule(
        name="compaction_sweep_schedule",
        job=compaction_batch_job,
        cron_schedule=config.sweep_cron,
        default_status=config.sweep_status,
        execution_timezone=config.timezone,
    )
    def compaction_sweep_schedule(context: dg.ScheduleEvaluationContext, log_store: LogStoreResource):
        """A compaction run per eligible (or delete-policy) log, like `clean --all`, uncleanable ones skipped."""
        now = now_ms()
        known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
        evaluations, config_for = [], log_store.config_per_topic()
        current = log_store.store.current_logs()
        for state in evaluate_read({n: m for n, m in current.items() if n in known}, config_for, now):
            ev = state.evaluation
            if ev is None:
                context.log.warning(f"{state.log}: cannot evaluate: {state.error}")
            elif not ev.uncleanable and (ev.eligible or config_for(ev.log).delete):
                evaluations.append(ev)
        due = order(evaluations)
        if not due:
            return dg.SkipReason(f"no eligible log at {now}")
        return cleaning_requests(context.instance, due, now, f"sweep:{now}:", always_batch=True)

    return compaction_sweep_schedule
