"""What one scrape of `compaction metrics serve` costs the endpoint's process, in CPU seconds (docs/monitoring.md,
docs/performance.md "A metrics scrape"):

    .venv/bin/python -m bench.metrics_scrape [--topics 10] [--partitions 4] [--scrapes 20]

Builds a store of TOPICS x PARTITIONS logs (two appends each, their tables committed, one landed file pending
per log), starts the endpoint in a process of its own, scrapes it once to warm it (imports, catalog), then
SCRAPES times, and prints the endpoint process's CPU (user + sys, psutil) per scrape, median of the scrapes
measured one by one, with the number of series a scrape returned.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import LogCommit, commit_logs
from compaction_assets.topics.config import build_config

ROOT = Path(__file__).resolve().parents[1]


def build(root: Path, topics: int, partitions: int) -> tuple[str, str]:
    """A store and a landing area: every log appended twice and committed, one file pending per log."""
    store, landing, config = LogStore(str(root / "store")), root / "landing", build_config({})
    for t in range(topics):
        handles = [store.log(f"topic{t}-{p}") for p in range(partitions)]
        for h in handles:
            for n in range(2):
                writer.append(h, config, [{"key": f"k{i}", "value": str(n), "timestamp": 1} for i in range(100)])
            folder = landing / f"topic{t}" / f"partition={h.partition}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "pending.jsonl").write_text(json.dumps({"key": "k", "value": "v", "timestamp": 1}) + "\n")
        commit_logs([LogCommit(h, config) for h in handles])
    return store.location, str(landing)


def scrape(url: str) -> str:
    for _ in range(600):
        try:
            with urllib.request.urlopen(url, timeout=60) as reply:
                return reply.read().decode()
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--scrapes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store, landing = build(Path(tmp), args.topics, args.partitions)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "COMPACTION_LANDING": landing, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "compaction_assets", "--store", store, "metrics", "serve", "--port", str(port)]
        server = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            series = sum(1 for line in scrape(url).splitlines() if line and not line.startswith("#"))
            process, costs = psutil.Process(server.pid), []
            for _ in range(args.scrapes):
                before = process.cpu_times()
                scrape(url)
                after = process.cpu_times()
                costs.append((after.user - before.user) + (after.system - before.system))
        finally:
            server.terminate()
            server.wait(timeout=60)
    logs = args.topics * args.partitions
    print(
        f"{logs} logs ({args.topics} topics), {series} series a scrape: "
        f"{statistics.median(costs) * 1000:.0f} ms CPU a scrape (median of {args.scrapes})"
    )


if __name__ == "__main__":
    main()
