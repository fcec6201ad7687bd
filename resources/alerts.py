"""The alert webhook resource: where alerts are POSTed, and the bearer token sent with them.

`url` and `token` are resolved when a run or a sensor tick starts, never when the code location loads:
bound to `dg.EnvVar(...)` they are read then (and a missing variable fails that run, naming it); left
unset, they fall back to COMPACTION_ALERT_WEBHOOK_URL / _TOKEN read through `settings` at that moment,
and no webhook at all is a valid deployment (alerts then go to the log only).
The token is never logged, never put in a payload, and never sent after a redirect (refused: urllib
would follow one to any host, token included).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from urllib.parse import urlparse

import dagster as dg

from compaction_assets import redaction, settings
from compaction_assets.errors import ConfigError

URL_ENV = settings.ALERT_WEBHOOK_URL
TOKEN_ENV = settings.ALERT_WEBHOOK_TOKEN


@dataclass(frozen=True)
class Alert:
    """One fault: the log, the check or the step that failed, why, a few examples, and the run."""

    log: str | None
    run: str
    reason: str
    severity: str = "ERROR"
    check: str | None = None
    step: str | None = None
    job: str | None = None
    examples: list = field(default_factory=list)

    def as_payload(self) -> dict:
        """The JSON body the webhook receives."""
        return asdict(self)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects are refused: urllib would follow one to any host (or to ftp://) and send the bearer
    token along."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, f"redirect refused ({code})", headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


class AlertWebhookResource(dg.ConfigurableResource):
    """POSTs each alert as JSON to an http(s) webhook, with an optional bearer token."""

    url: str | None = None  # None: COMPACTION_ALERT_WEBHOOK_URL when the tick or run starts
    token: str | None = None  # None: COMPACTION_ALERT_WEBHOOK_TOKEN when the tick or run starts
    timeout_seconds: float = 10.0

    def resolved_url(self) -> str | None:
        """The webhook's URL, or None when there is none; refused unless http or https."""
        url = self.url if self.url else settings.current().alert_webhook_url
        if not url:
            return None
        parsed = urlparse(url)
        if parsed.scheme.lower() not in ("http", "https") or not parsed.netloc:
            raise ConfigError(f"{URL_ENV} must be an http or https URL (got a {parsed.scheme or 'schemeless'} URL)")
        return url

    def resolved_token(self) -> str | None:
        """The bearer token, or None."""
        return self.token if self.token else settings.current().alert_webhook_token

    def redact(self, text: str) -> str:
        """`text` with the token (bound in code or not) and every other secret masked (redaction.py)."""
        return redaction.redact(text, (self.resolved_token(),))

    def send(self, alert: Alert | dict, log) -> bool:
        """Log the alert; POST it to the webhook when one is configured. True when delivered (or no webhook)."""
        payload = alert.as_payload() if isinstance(alert, Alert) else dict(alert)
        log.error(self.redact(f"compaction alert: {json.dumps(payload, sort_keys=True, default=str)}"))
        try:
            url = self.resolved_url()
        except ConfigError as exc:
            log.error(str(exc))
            return False
        if url is None:
            return True
        headers = {"Content-Type": "application/json"}
        token = self.resolved_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        body = self.redact(json.dumps(payload, default=str)).encode()
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with _OPENER.open(req, timeout=self.timeout_seconds) as resp:
                return 200 <= resp.status < 300
        except (urllib.error.URLError, OSError) as exc:
            log.error(self.redact(f"alert webhook failed: {exc}"))
            return False
