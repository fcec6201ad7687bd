"""Where a Spark-route ingestion's CPU goes: this driver process (reading the staged units back and committing
them), the JVM, and Spark's Python workers (reading and shaping), for a cold run (the session's first jobs)
and warm ones (the same session again, each into a fresh store).

    .venv/bin/python -m bench.spark_ingest LANDING [--layout native-jsonl] [--runs 2] [--json OUT]

LANDING is a layout's landing folder as `bench.landing --work DIR` writes it (`DIR/<layout>/landing`). The
session is SPARK_MASTER's (default local[*]), started before the timing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import psutil

from bench.landing import CONFIGS, TOPIC


def cpu_by_part() -> dict[str, float]:
    """CPU seconds so far of this process, of the JVM and of the Python workers (each with the children it
    has reaped: a worker that exited is in its daemon's account)."""
    me = psutil.Process()
    parts = {"driver": me.cpu_times().user + me.cpu_times().system, "jvm": 0.0, "python_workers": 0.0}
    for proc in me.children(recursive=True):
        try:
            times = proc.cpu_times()
            name = "jvm" if "java" in proc.name() else "python_workers"
        except psutil.NoSuchProcess:
            continue
        parts[name] += times.user + times.system + times.children_user + times.children_system
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("landing")
    ap.add_argument("--layout", default="native-jsonl")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()

    from compaction_assets.ingest.landing import ingest, landing_logs
    from compaction_assets.ingest.route import SparkOffer
    from compaction_assets.spark import get_spark
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    session = get_spark()
    offer = SparkOffer(lambda: session, 0, requested=True)
    work = Path(tempfile.mkdtemp(prefix="spark-ingest-"))
    results = []
    for run in range(args.runs):
        store = work / f"store-{run}"
        before, started = cpu_by_part(), time.perf_counter()
        source = landing_logs(args.landing)[0][f"{TOPIC}-0"]
        report = ingest(
            LogStore(str(store), gc_grace_s=0).log(f"{TOPIC}-0"),
            build_config(CONFIGS.get(args.layout, {})),
            source,
            spark=offer,
        )
        after = cpu_by_part()
        result = {
            "run": "cold" if run == 0 else "warm",
            "seconds": round(time.perf_counter() - started, 2),
            "records": report.records_appended,
            "path": report.path,
            **{part: round(after[part] - before[part], 2) for part in after},
        }
        result["cpu_seconds"] = round(sum(result[part] for part in after), 2)
        print(json.dumps(result), flush=True)
        results.append(result)
        shutil.rmtree(store, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
