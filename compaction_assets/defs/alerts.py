"""Alerts: exactly one per fault, to the log and to the webhook (resources/alerts.py), read through
Dagster's public API only.

A fault is a failed check evaluation, or a failed run that no failed check explains. So:

- `run_failure_alert` (a run that failed): one alert per failed check evaluation of the run; when the
  run has none, one alert naming the failed step and its error. A blocking check that fails also fails
  its step and the run: it pages once, as the check.
- `check_failure_alert` (a run that succeeded): one alert per failed check evaluation of the run (a WARN
  check, or an ERROR check that does not block).

Each alert names the log (the run's partition), the check or the step, the reason, up to five
examples from the check's metadata, the job and the run's id. Both are run-status sensors: the daemon
keeps their cursor, so a run is reported once.
"""

import re

import dagster as dg

from compaction_assets.defs.batches.outcome import FAILURE_KEY
from resources.alerts import Alert, AlertWebhookResource

MAX_EXAMPLES = 5
PARTITION_TAG = "dagster/partition"
# metadata of a step's failure that another run reported already (errors.AlreadyReportedError): no alert
REPORTED_KEY = "reported_by_another_run"


def _value(entry):
    """A metadata entry's plain value (Dagster wraps them in MetadataValue)."""
    return getattr(entry, "value", entry)


def failed_check_alerts(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[Alert]:
    """One alert per failed check evaluation recorded by the run."""
    alerts = []
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
        evaluation = entry.get_dagster_event().asset_check_evaluation_data
        if evaluation.passed:
            continue
        meta = evaluation.metadata or {}
        examples = [x for key in sorted(meta) if key.startswith("examples") for x in (_value(meta[key]) or [])][
            :MAX_EXAMPLES
        ]
        log = evaluation.partition or run.tags.get(PARTITION_TAG) or (_value(meta["log"]) if "log" in meta else None)
        alerts.append(
            Alert(
                log=log,
                run=run.run_id,
                job=run.job_name,
                check=evaluation.check_name,
                severity=evaluation.severity.value,
                reason=evaluation.description or f"check {evaluation.check_name} failed",
                examples=examples,
            )
        )
    return alerts


def error_reason(error) -> str:
    """The first line of a step's error without the exception's class path (Dagster's message starts
    with `dagster._core.definitions.events.Failure: ` for a step that raised dg.Failure)."""
    first = (error.message.strip().splitlines() or ["step failed"])[0]
    if error.cls_name:
        prefix = re.match(r"(?:\w+\.)*" + re.escape(error.cls_name) + ": ", first)
        if prefix:
            return first[prefix.end() :]
    return first


def batch_failure_alerts(instance: dg.DagsterInstance, run: dg.DagsterRun, alerted: set) -> list[Alert]:
    """One alert per log that failed in a batch run (defs/batches/outcome.py records each as an observation),
    unless a failed check of that log already pages for it."""
    alerts, seen = [], set(alerted)
    for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION):
        observation = entry.get_dagster_event().asset_observation_data.asset_observation
        reason = observation.metadata.get(FAILURE_KEY)  # a log that failed in a batch
        if reason is None or observation.partition in seen:
            continue
        seen.add(observation.partition)  # a retried step records its logs' failures once more
        alerts.append(
            Alert(
                log=observation.partition,
                run=run.run_id,
                job=run.job_name,
                step=observation.asset_key.to_user_string(),
                reason=str(_value(reason)),
            )
        )
    return alerts


def run_failure_alerts(context: dg.RunFailureSensorContext) -> list[Alert]:
    """The alerts of one failed run: its failed checks and failed logs, or else its failed step (or the
    run's error)."""
    run = context.dagster_run
    checks = failed_check_alerts(context.instance, run)
    logs = batch_failure_alerts(context.instance, run, {a.log for a in checks})
    if checks or logs:
        return checks + logs
    log = run.tags.get(PARTITION_TAG)
    failed = context.get_step_failure_events()
    steps = [step for step in failed if not _reported(step)]
    if failed and not steps:
        return []  # the fault's first finder paged it (one alert per fault)
    if steps:
        step = steps[0]
        error = step.step_failure_data.error
        reason = error_reason(error) if error else (step.message or "step failed")
        return [Alert(log=log, run=run.run_id, job=run.job_name, step=step.step_key, reason=reason)]
    return [
        Alert(
            log=log,
            run=run.run_id,
            job=run.job_name,
            reason=(context.failure_event.message or "run failed").strip().splitlines()[0],
        )
    ]


def _reported(step: dg.DagsterEvent) -> bool:
    """True for a step failure another run reported first (its dg.Failure carries REPORTED_KEY)."""
    user = step.step_failure_data.user_failure_data
    return user is not None and REPORTED_KEY in (user.metadata or {})


@dg.run_failure_sensor(
    name="run_failure_alert", minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING
)
def run_failure_alert(context: dg.RunFailureSensorContext, alert_webhook: AlertWebhookResource) -> None:
    """Alert once per fault of a failed run: each failed check, or else the failed step."""
    for alert in run_failure_alerts(context):
        alert_webhook.send(alert, context.log)


@dg.run_status_sensor(
    name="check_failure_alert",
    run_status=dg.DagsterRunStatus.SUCCESS,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def check_failure_alert(context: dg.RunStatusSensorContext, alert_webhook: AlertWebhookResource):
    """Alert once per failed check evaluation of a run that succeeded (non-blocking checks)."""
    alerts = failed_check_alerts(context.instance, context.dagster_run)
    for alert in alerts:
        alert_webhook.send(alert, context.log)
    if not alerts:
        return dg.SkipReason(f"run {context.dagster_run.run_id}: no failed checks")
