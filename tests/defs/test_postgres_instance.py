"""The production Dagster instance, for real: PostgreSQL on loopback (tests/pg_server.py), the
`dagster.yaml` block of docs/deployment.md written as it is (the database's URL from the environment),
and `dagster-daemon run -w workspace.yaml` with the product's sensors over a small fleet of logs and the
pool limit. Every log is cleaned by a run the sensors started, every check of those runs is recorded,
and the alert sensor, through the daemon, calls the webhook exactly once for a corrupt segment: from the
cleaning or from the table's catch-up, whichever run meets it first (the other pages nothing more)."""

import http.server
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import ClassVar

import dagster as dg
import pytest

from compaction_assets.definitions import defs
from compaction_assets.log import reader, writer
from compaction_assets.settings import ALERT_WEBHOOK_URL
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from tests.defs.test_pool import SPARK_STEPS, max_overlap

ROOT = Path(__file__).resolve().parents[2]
OLD = 1_000_000_000  # appended long ago: every segment is past its roll deadline, so sealed
GOOD = ["users-0", "users-1", "users-2"]
BAD = "users-3"
WAIT_S = 900  # how long the fleet may take on a loaded machine before the test gives up
# the checks compaction_job runs (table_freshness is its sensor's job's: defs/table/freshness.py)
CHECKS = sorted(k.name for k in defs.resolve_job_def("compaction_job").asset_layer.asset_graph.asset_check_keys)


def deployment_yaml() -> str:
    """docs/deployment.md's dagster.yaml block, as a user copies it."""
    text = (ROOT / "docs" / "deployment.md").read_text()
    section = text[text.index("## A production Dagster instance") :]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


class _Hook(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[float, dict]]] = []

    def do_POST(self):
        _Hook.received.append((time.time(), json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def webhook():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Hook.received = []
    yield f"http://127.0.0.1:{server.server_port}/alerts", _Hook.received
    server.shutdown()


def make_fleet(root: Path) -> dict[str, dict[bytes, bytes]]:
    """Three logs with superseded records and one whose first segment file is cut in half; returns what a
    cleaning must leave of each good log (last value per key, computed here)."""
    store = LogStore(str(root))
    expected = {}
    for name in GOOD + [BAD]:
        records = [{"key": f"k{i % 3}", "value": f"{name}-v{i}", "timestamp": 100 + i} for i in range(30)]
        writer.append(store.log(name), build_config({}), records, now=OLD)
        expected[name] = {r["key"].encode(): r["value"].encode() for r in records}
    handle = store.log(BAD)
    segment_file = Path(handle.path(handle.manifest().segments[0].files[0].name))
    segment_file.write_bytes(segment_file.read_bytes()[: segment_file.stat().st_size // 2])
    return expected


def start_daemon(home: Path, tmp: Path, pg_url: str, hook_url: str) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    env.update(
        {
            "DAGSTER_HOME": str(home),
            "DAGSTER_PG_URL": pg_url,
            "PYTHONPATH": str(ROOT),
            "COMPACTION_STORE": str(tmp / "store"),
            "COMPACTION_LANDING": str(tmp / "landing"),
            "COMPACTION_LATEST_STATE": str(tmp / "latest"),
            ALERT_WEBHOOK_URL: hook_url,
            "SPARK_MASTER": "local[1]",
        }
    )
    log = tmp / "daemon.log"
    daemon = os.path.join(os.path.dirname(sys.executable), "dagster-daemon")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [daemon, "run", "-w", "workspace.yaml"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc, log


def stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def runs_by_log(instance) -> dict[str, list]:
    out = {}
    for record in instance.get_run_records(dg.RunsFilter(job_name="compaction_job")):
        out.setdefault(record.dagster_run.tags.get("dagster/partition"), []).append(record)
    return out


def catch_up_runs(instance) -> list:
    return list(instance.get_run_records(dg.RunsFilter(job_name="table_catch_up_job")))


def last_tick(instance, sensor: str) -> float:
    """When the daemon last finished a tick of `sensor` (0 when it has not)."""
    for state in instance.all_instigator_state():
        if state.instigator_name == sensor:
            ticks = [
                t
                for t in instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=5)
                if t.status.value != "STARTED"
            ]  # by value: the enum is private
            return max((t.timestamp for t in ticks), default=0.0)
    return 0.0


def settled(instance, received, store: LogStore) -> bool:
    """Every good log has a finished cleaning run, the bad one is marked, the alert came, no run is in
    flight, and both alert sensors ticked after the last run ended (so a second alert for any run would
    have been sent by then)."""
    runs = runs_by_log(instance)
    finished = [r for log in GOOD for r in runs.get(log, []) if r.dagster_run.is_finished]
    if {r.dagster_run.tags.get("dagster/partition") for r in finished} != set(GOOD):
        return False
    every = [r for rs in runs.values() for r in rs] + catch_up_runs(instance)
    if any(not r.dagster_run.is_finished for r in every) or not received or not store.log(BAD).manifest().uncleanable:
        return False
    ended = max(r.end_time or 0 for r in every)
    return all(last_tick(instance, s) > ended + 1 for s in ("run_failure_alert", "check_failure_alert"))


def step_spans(instance, run_id: str) -> list[tuple[float, float]]:
    starts, ends = {}, {}
    for entry in instance.all_logs(run_id):
        event = entry.get_dagster_event() if entry.is_dagster_event else None
        if event is not None and event.step_key in SPARK_STEPS:
            if event.is_step_start:
                starts[event.step_key] = entry.timestamp
            elif event.is_step_success or event.is_step_failure:
                ends[event.step_key] = entry.timestamp
    return [(starts[k], ends[k]) for k in starts if k in ends]


@pytest.mark.ci_real
@pytest.mark.slow  # 4-5 minutes: sensor ticks are 30 s apart, and each run starts its own Spark
def test_daemon_on_postgres_cleans_the_fleet_records_checks_and_alerts_once(
    tmp_path, postgres_server, webhook, monkeypatch
):
    home = tmp_path / "dagster_home"
    home.mkdir()
    block = deployment_yaml()
    assert "postgres_url" in block and "DAGSTER_PG_URL" in block and "default_limit: 2" in block
    (home / "dagster.yaml").write_text(block)
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_server.url)
    assert postgres_server.url.startswith("postgresql+psycopg2://")
    expected = make_fleet(tmp_path / "store")
    hook_url, received = webhook
    proc, log = start_daemon(home, tmp_path, postgres_server.url, hook_url)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            deadline = time.monotonic() + WAIT_S
            while not settled(instance, received, LogStore(str(tmp_path / "store"))):
                assert proc.poll() is None, f"dagster-daemon exited: {log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, (
                    f"the fleet did not settle in {WAIT_S}s: {runs_by_log(instance)} {log.read_text()[-3000:]}"
                )
                time.sleep(3)
            runs = runs_by_log(instance)
            spans = [s for rs in runs.values() for r in rs for s in step_spans(instance, r.dagster_run.run_id)]
            checks = {
                log: sorted(
                    {
                        e.get_dagster_event().asset_check_evaluation_data.check_name
                        for r in runs[log]
                        for e in instance.all_logs(
                            r.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
                        )
                        if e.get_dagster_event().asset_check_evaluation_data.passed
                    }
                )
                for log in GOOD
            }
    finally:
        stop(proc)
    store = LogStore(str(tmp_path / "store"))
    for name in GOOD:
        # one sensor's run, or one of each cleaning sensor's (dirty ratio, max lag): every one succeeded
        assert {r.dagster_run.status for r in runs[name]} == {dg.DagsterRunStatus.SUCCESS}, name
        records = list(reader.iter_records(store.log(name)))
        assert {r.key: r.value for r in records} == expected[name] and len(records) == len(expected[name]), name
        assert checks[name] == CHECKS, name
    # the bad log's cleaning failed on the segment, or found the log marked by the catch-up that met it first
    assert dg.DagsterRunStatus.STARTED not in {r.dagster_run.status for r in runs.get(BAD, [])}
    assert len(received) == 1, [(b["job"], b.get("step"), b.get("check"), b["reason"][:300]) for _, b in received]
    body = received[0][1]
    assert body["log"] == BAD and body["job"] in ("compaction_job", "table_catch_up_job"), body
    assert f"log '{BAD}': segment" in body["reason"] and "Parquet" in body["reason"], body["reason"]
    assert store.log(BAD).manifest().uncleanable
    assert 1 <= max_overlap(spans) <= 2  # the pool's limit in the documented block
