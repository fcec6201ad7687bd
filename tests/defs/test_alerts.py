"""The alert webhook resource: only http/https URLs; the bearer token (a resource field, bound to
dg.EnvVar, or the environment read when the tick starts) never appears in a log line, a payload, an error
message or a request to anyone but the webhook itself (redirects are refused: urllib would follow one to
another host, token included). Real HTTP servers on 127.0.0.1 receive the requests
(tests/defs/test_dagster.py covers the alerts of failed runs and checks)."""

from __future__ import annotations

import http.server
import json
import logging
import threading

import dagster as dg
import pytest

from compaction_assets.defs import alerts
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.errors import ConfigError
from resources import alerts as alert_resource
from resources.alerts import AlertWebhookResource

TOKEN = "tok-3f9a7c1e-very-secret"


class Server:
    """An HTTP server on 127.0.0.1 that records requests and answers with a fixed status."""

    def __init__(self, status: int = 204, location: str | None = None, reason: str | None = None):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                received.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
                self.send_response(status, reason)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = do_PUT = _any

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


class Log:
    def __init__(self):
        self.lines: list[str] = []

    def error(self, msg):
        self.lines.append(str(msg))

    warning = info = error


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture
def token(monkeypatch):
    monkeypatch.setenv(alert_resource.TOKEN_ENV, TOKEN)
    return TOKEN


def webhook() -> AlertWebhookResource:
    """The resource as the code location binds it: URL and token resolved when it is used."""
    return AlertWebhookResource()


PAYLOAD = {"log": "users-0", "check": "latest_value_per_key", "run": "r1", "reason": "bad", "severity": "ERROR"}

BAD_URLS = [
    "file:///etc/passwd",
    "ftp://{host}/x",
    "gopher://{host}/",
    "ws://{host}/",
    "javascript:alert(1)",
    "data:text/plain,hello",
    "//{host}/hook",
    "{host}/hook",
    "http://",
    "https:///hook",
    "http:/hook",
    "mailto:ops@example.com",
    "ftp://user:" + TOKEN + "@{host}/",
]


@pytest.mark.parametrize("template", BAD_URLS)
def test_only_http_and_https_urls_are_accepted(monkeypatch, server, token, template):
    url = template.format(host=server.url.split("//")[1])
    monkeypatch.setenv(alert_resource.URL_ENV, url)
    with pytest.raises(ConfigError) as info:
        webhook().resolved_url()
    msg = str(info.value)
    assert alert_resource.URL_ENV in msg and "http or https" in msg and "\n" not in msg
    assert TOKEN not in msg and url not in msg  # a URL may carry credentials: not echoed
    log = Log()
    assert webhook().send(PAYLOAD, log) is False  # refused, reported, nothing sent
    assert server.received == []
    assert any("http or https" in line for line in log.lines)
    assert all(TOKEN not in line for line in log.lines)


@pytest.mark.parametrize("scheme", ["http", "HTTP", "Http"])
def test_http_urls_deliver_with_the_bearer_token(monkeypatch, server, token, scheme):
    monkeypatch.setenv(alert_resource.URL_ENV, scheme + server.url[4:] + "/hook")
    log = Log()
    assert webhook().send(PAYLOAD, log) is True
    [(method, path, headers, body)] = server.received
    assert (method, path) == ("POST", "/hook")
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert json.loads(body) == PAYLOAD
    assert all(TOKEN not in line for line in log.lines)


def test_https_url_is_accepted(monkeypatch):
    monkeypatch.setenv(alert_resource.URL_ENV, "https://hooks.example.com/x")
    assert webhook().resolved_url() == "https://hooks.example.com/x"


def test_url_and_token_from_envvar_resolve_at_launch(monkeypatch, server):
    """Bound to dg.EnvVar, URL and token are read when the run starts, not when the resource is built."""
    monkeypatch.delenv(alert_resource.URL_ENV, raising=False)
    monkeypatch.setenv("HOOK_URL_FOR_TEST", server.url + "/launch")
    monkeypatch.setenv("HOOK_TOKEN_FOR_TEST", TOKEN)
    resource = AlertWebhookResource(url=dg.EnvVar("HOOK_URL_FOR_TEST"), token=dg.EnvVar("HOOK_TOKEN_FOR_TEST"))

    @dg.op
    def page(alert_webhook: AlertWebhookResource) -> bool:
        return alert_webhook.send(PAYLOAD, Log())

    @dg.job(resource_defs={"alert_webhook": resource})
    def paging():
        page()

    with dg.instance_for_test() as instance:
        result = paging.execute_in_process(instance=instance)
        assert result.output_for_node("page") is True
        stored = "\n".join(str(e) for e in instance.all_logs(result.run_id))
    [(_method, path, headers, _body)] = server.received
    assert path == "/launch" and headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in stored


def test_no_webhook_configured_logs_only(monkeypatch):
    monkeypatch.delenv(alert_resource.URL_ENV, raising=False)
    log = Log()
    assert webhook().send(PAYLOAD, log) is True
    assert "compaction alert" in log.lines[0]


def test_no_token_no_authorization_header(monkeypatch, server):
    monkeypatch.delenv(alert_resource.TOKEN_ENV, raising=False)
    monkeypatch.setenv(alert_resource.URL_ENV, server.url + "/hook")
    assert webhook().send(PAYLOAD, Log()) is True
    assert "Authorization" not in server.received[0][2]


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("target", ["other-host", "ftp"])
def test_redirects_are_refused_and_the_token_goes_nowhere_else(monkeypatch, token, status, target):
    thief = Server()
    location = thief.url + "/steal" if target == "other-host" else "ftp://" + thief.url.split("//")[1] + "/steal"
    hook = Server(status=status, location=location)
    try:
        monkeypatch.setenv(alert_resource.URL_ENV, hook.url + "/hook")
        log = Log()
        assert webhook().send(PAYLOAD, log) is False
        assert len(hook.received) == 1 and hook.received[0][2]["Authorization"] == f"Bearer {TOKEN}"
        assert thief.received == []
        assert any("alert webhook failed" in line for line in log.lines)
        assert all(TOKEN not in line for line in log.lines)
    finally:
        hook.close()
        thief.close()


def test_token_redacted_from_error_messages_and_payloads(monkeypatch, token):
    # a webhook that puts the token it received in its reason phrase, and a payload that contains it
    hook = Server(status=500, reason=f"rejected {TOKEN}")
    try:
        monkeypatch.setenv(alert_resource.URL_ENV, hook.url + "/hook")
        log = Log()
        payload = {**PAYLOAD, "reason": f"step failed with env {TOKEN}"}
        assert webhook().send(payload, log) is False
        body = hook.received[0][3].decode()
        assert TOKEN not in body and json.loads(body)["reason"] == "step failed with env ***"
        assert any("500" in line for line in log.lines)
        assert all(TOKEN not in line for line in log.lines)
    finally:
        hook.close()


def test_unreachable_webhook_is_reported_without_the_token(monkeypatch, token):
    dead = Server()
    url = dead.url + "/hook"
    dead.close()
    monkeypatch.setenv(alert_resource.URL_ENV, url)
    log = Log()
    assert webhook().send(PAYLOAD, log) is False
    assert any("alert webhook failed" in line for line in log.lines)
    assert all(TOKEN not in line for line in log.lines)


def test_failed_run_alert_keeps_the_token_out_of_dagster(monkeypatch, server, token, tmp_path, caplog):
    """A real failed run on a real instance: the alert carries the bearer token to the webhook only;
    neither the instance's event log nor the Python log holds it."""
    from dagster_pyspark import LazyPySparkResource

    from compaction_assets.defs.assets import raw_segments
    from resources.log_store import LogStoreResource
    from tests.defs.test_dagster import materialize

    monkeypatch.setenv(alert_resource.URL_ENV, server.url + "/hook")
    monkeypatch.delenv(alert_resource.TOKEN_ENV, raising=False)  # bound as a field this time, not from the environment
    folder = tmp_path / "landing" / "users" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text('{"key": null, "value": "x", "timestamp": 1}\n')
    resources = {
        "log_store": LogStoreResource(
            root=str(tmp_path / "store"),
            landing=str(tmp_path / "landing"),
            topics_file=None,
            latest_state_root=str(tmp_path / "latest"),
        ),
        "pyspark": LazyPySparkResource(spark_config={}),
    }
    caplog.set_level(logging.DEBUG)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, ["users-0"])
        result = materialize([raw_segments], "users-0", resources, instance, raise_on_error=False)
        assert not result.success
        failure = [e for e in result.all_events if e.event_type_value in ("RUN_FAILURE", "PIPELINE_FAILURE")][0]
        ctx = dg.build_run_status_sensor_context(
            sensor_name="run_failure_alert",
            dagster_instance=instance,
            dagster_run=instance.get_run_by_id(result.run_id),
            dagster_event=failure,
            resources={"alert_webhook": AlertWebhookResource(token=TOKEN)},
        ).for_run_failure()
        alerts.run_failure_alert(ctx)
        assert server.received and server.received[0][2]["Authorization"] == f"Bearer {TOKEN}"
        body = json.loads(server.received[0][3])
        assert body["run"] == result.run_id and body["log"] == "users-0" and body["step"] == "raw_segments"
        assert "a.jsonl" in body["reason"] and body["check"] is None
        stored = "\n".join(str(e) for e in instance.all_logs(result.run_id))
        assert "a.jsonl" in stored and TOKEN not in stored
    assert TOKEN not in caplog.text


def test_a_webhook_url_that_is_its_own_credential_is_never_logged(monkeypatch, token):
    """A Slack-style webhook's URL carries its secret in its path: a webhook that quotes the URL back in its
    error (or a payload that contains it) shows it in no log line and no body sent."""
    secret_path = "/services/T0/B0/hook-path-secret-5c2d"
    hook = Server(status=500)
    try:
        url = hook.url + secret_path
        hook.httpd.RequestHandlerClass.send_response = (  # the reason phrase quotes the URL it was called at
            lambda handler, code, message=None: http.server.BaseHTTPRequestHandler.send_response(
                handler, code, f"rejected {url}"
            )
        )
        monkeypatch.setenv(alert_resource.URL_ENV, url)
        log = Log()
        assert webhook().send({**PAYLOAD, "reason": f"posted to {url}"}, log) is False
        [(_method, path, _headers, body)] = hook.received
        assert path == secret_path  # the request went to the URL as configured
        assert any("500" in line for line in log.lines), log.lines
        assert all(secret_path not in line for line in log.lines), log.lines
        assert secret_path.encode() not in body
    finally:
        hook.close()
