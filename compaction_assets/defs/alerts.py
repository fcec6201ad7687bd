"""Alerts: every failed run and every failed asset check, to the log and optionally to a webhook.

COMPACTION_ALERT_WEBHOOK_URL (http or https only) receives a JSON POST {log, check, run, reason,
severity}; COMPACTION_ALERT_WEBHOOK_TOKEN, when set, is sent as a bearer token and never logged (nor
sent in a payload, nor after a redirect: redirects are refused).
"""


import json
import urllib.error
import urllib.request
from urllib.parse import urlparse

import dagster as dg
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from compaction_assets import settings
from compaction_assets.checks.specs import CHECK_SPECS
from compaction_assets.errors import ConfigError

URL_ENV = settings.ALERT_WEBHOOK_URL
TOKEN_ENV = settings.ALERT_WEBHOOK_TOKEN


def webhook_url() -> str | None:
    """The alert webhook's URL from the settings, or None; refused unless http or https."""
    url = settings.current().alert_webhook_url
    if not url:
        return None
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ConfigError(f"{URL_ENV} must be an http or https URL (got a {parsed.scheme or 'schemeless'} URL)")
    return url


def _redact(text: str) -> str:
    token = settings.current().alert_webhook_token
    return text.replace(token, "***") if token else text


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are refused: urllib would follow one to any host (or to ftp://) and send the bearer
    token along."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({code})", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


def send_alert(payload: dict, log) -> bool:
    """Log the alert; POST it to the webhook when one is configured. True when delivered (or no webhook)."""
    log.error(_redact(f"compaction alert: {json.dumps(payload, sort_keys=True)}"))
    try:
        url = webhook_url()
    except ConfigError as exc:
        log.error(str(exc))
        return False
    if url is None:
        return True
    headers = {"Content-Type": "application/json"}
    token = settings.current().alert_webhook_token
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = _redact(json.dumps(payload)).encode()
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(req, timeout=10) as resp:
            return 200 <= resp.status < 300
    except (urllib.error.URLError, OSError) as exc:
        log.error(_redact(f"alert webhook failed: {exc}"))
        return False


@dg.run_failure_sensor(name="run_failure_alert", minimum_interval_seconds=30,
                       default_status=dg.DefaultSensorStatus.RUNNING)
def run_failure_alert(context: dg.RunFailureSensorContext) -> None:
    """Alert once per failed run, naming its log, job and reason."""
    run = context.dagster_run
    send_alert({"log": run.tags.get("dagster/partition"), "check": None, "run": run.run_id,
                "job": run.job_name, "reason": context.failure_event.message or "run failed",
                "severity": "ERROR"}, context.log)


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def check_failure_alert(context: dg.SensorEvaluationContext):
    """Polls the history of the compacted_log checks and alerts once per new failed evaluation."""
    cursor = json.loads(context.cursor) if context.cursor else {}
    storage = context.instance.event_log_storage
    sent = 0
    for spec in CHECK_SPECS:
        name = spec.name
        key = dg.AssetCheckKey(dg.AssetKey("compacted_log"), name)
        records = storage.get_asset_check_execution_history(
            key, limit=100, status={AssetCheckExecutionRecordStatus.FAILED})
        seen = cursor.get(name, 0)
        for rec in sorted(records, key=lambda r: r.id):
            if rec.id <= seen:
                continue
            evaluation = rec.event.dagster_event.event_specific_data if rec.event and rec.event.dagster_event else None
            reason = getattr(evaluation, "description", None) or "check failed"
            meta = getattr(evaluation, "metadata", None) or {}
            log = rec.partition or (meta["log"].value if "log" in meta else None)
            send_alert({"log": log, "check": name, "run": rec.run_id, "reason": reason,
                        "severity": spec.severity}, context.log)
            cursor[name] = rec.id
            sent += 1
    context.update_cursor(json.dumps(cursor))
    if not sent:
        return dg.SkipReason("no new failed checks")
