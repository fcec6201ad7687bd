"""Metrics a monitoring stack scrapes: Kafka's log-cleaner figures, each log's table lag and landing backlog,
as Prometheus text (prometheus_client), from `compaction metrics --format prometheus` and from the endpoint
`compaction metrics serve --port N`, scraped over HTTP and parsed with prometheus_client's parser."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from compaction_assets.cli import main
from compaction_assets.ingest.backlog import store_backlog
from tests.table.helpers import put

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_900_000_000_000


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def land(root: Path, topic: str, name: str, mtime_ms: int, lines: int = 1) -> Path:
    folder = root / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps({"key": f"k{i}", "value": "v", "timestamp": 1}) + "\n" for i in range(lines)))
    os.utime(path, (mtime_ms / 1000, mtime_ms / 1000))
    return path


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of a Prometheus text, parsed by prometheus_client's parser."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _fleet(store, tmp_path, capsys) -> Path:
    """users-0 ingested from the landing area, with one more file pending; orders-0 appended, its table behind."""
    landing = tmp_path / "landing"
    land(landing, "users", "0001.jsonl", NOW - 50_000)
    assert cli(capsys, "--store", store.location, "ingest", "--landing", str(landing))[0] == 0
    land(landing, "users", "0002.jsonl", NOW - 30_000, lines=3)
    land(landing, "users", "0003.jsonl", NOW - 10_000)
    put(store.log("orders-0"), {"a": "1", "b": "2"})
    return landing


def test_the_landing_backlog_is_per_log_files_bytes_and_the_oldest_age(store, tmp_path, capsys):
    landing = _fleet(store, tmp_path, capsys)
    [users] = store_backlog(store, str(landing), NOW).values()
    pending = [landing / "users" / "partition=0" / n for n in ("0002.jsonl", "0003.jsonl")]
    assert (users.log, len(users.pending)) == ("users-0", 2)
    assert users.pending_bytes == sum(p.stat().st_size for p in pending)
    assert users.oldest_pending_age_ms == 30_000


def test_metrics_format_prometheus(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPACTION_LANDING", str(_fleet(store, tmp_path, capsys)))
    code, out, err = cli(capsys, "--store", store.location, "--now", str(NOW), "metrics", "--format", "prometheus")
    assert code == 0, err
    found = samples(out)
    for kafka_name in (
        "max_dirty_percent",
        "max_clean_time_secs",
        "max_compaction_delay_secs",
        "uncleanable_partitions_count",
        "time_since_last_run_ms",
    ):
        assert (f"compaction_log_cleaner_{kafka_name}", ()) in found, kafka_name
    assert found[("compaction_log_cleaner_uncleanable_partitions_count", ())] == 0
    assert found[("compaction_log_cleaner_time_since_last_run_ms", ())] == -1  # never cleaned
    assert found[("compaction_logs", ())] == 2 and found[("compaction_up", ())] == 1
    users = (("log", "users-0"), ("partition", "0"), ("topic", "users"))
    orders = (("log", "orders-0"), ("partition", "0"), ("topic", "orders"))
    assert found[("compaction_landing_pending_files", users)] == 2
    assert found[("compaction_landing_oldest_pending_age_seconds", users)] == 30.0
    assert found[("compaction_landing_pending_files", orders)] == 0  # a log without a landing folder
    assert found[("compaction_table_lag_records", users)] == 0  # ingest committed its table
    assert found[("compaction_table_lag_records", orders)] == 2
    assert found[("compaction_table_late", orders)] in (0, 1)
    # the JSON stays what it was, by default and asked for
    code, out, _ = cli(capsys, "--store", store.location, "--now", str(NOW), "metrics")
    assert json.loads(out)["uncleanable-partitions-count"] == 0 and json.loads(out)["logs"] == 2
    assert cli(capsys, "--store", store.location, "--now", str(NOW), "metrics", "--format", "json")[1] == out
    code, _, err = cli(capsys, "--store", store.location, "metrics", "--format", "xml")
    assert code == 2 and "'xml' is not one of 'json', 'prometheus'" in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(url: str, deadline_s: float = 120) -> str:
    start = time.monotonic()
    while True:
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                assert reply.status == 200
                return reply.read().decode()
        except OSError:
            if time.monotonic() - start > deadline_s:
                raise
            time.sleep(0.2)


def test_the_endpoint_serves_fresh_values_each_scrape(store, tmp_path, capsys):
    landing = _fleet(store, tmp_path, capsys)
    port = _free_port()
    env = {
        **os.environ,
        "COMPACTION_LANDING": str(landing),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    argv = [
        sys.executable,
        "-m",
        "compaction_assets",
        "--store",
        store.location,
        "metrics",
        "serve",
        "--port",
        str(port),
    ]
    server = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        users = (("log", "users-0"), ("partition", "0"), ("topic", "users"))
        first = samples(_scrape(f"http://127.0.0.1:{port}/metrics"))
        assert first[("compaction_landing_pending_files", users)] == 2
        assert first[("compaction_log_cleaner_uncleanable_partitions_count", ())] == 0
        land(landing, "users", "0004.jsonl", int(time.time() * 1000))
        second = samples(_scrape(f"http://127.0.0.1:{port}/metrics"))
        assert second[("compaction_landing_pending_files", users)] == 3  # read again for this scrape
    finally:
        server.send_signal(signal.SIGINT)
        _, err = server.communicate(timeout=60)
    assert server.returncode == 0, err
    assert f"serving metrics on http://127.0.0.1:{port}/metrics" in err  # loopback unless told


def test_serve_refuses_a_port_in_use_in_one_line(store, capsys):
    put(store.log("users-0"), {"a": "1"})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, _, err = cli(
            capsys, "--store", store.location, "metrics", "serve", "--port", str(port), "--address", "127.0.0.1"
        )
    assert code == 1 and err.count("\n") == 1 and f"cannot serve metrics on 127.0.0.1:{port}" in err, err
