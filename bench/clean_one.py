"""One cleaning of one log in its own process: the 1g-driver run of the benchmark.

    SPARK_DRIVER_MEMORY=1g .venv/bin/python -m bench.clean_one --store DIR --work DIR --json OUT [--segment-bytes N]

Starts a Spark session with the benchmark's settings (the driver memory comes from the environment,
as in production), cleans the log `bench-0` of the store DIR (forced, the benchmark's clock), and writes
the outcome as JSON: success, seconds, the engine's stats, the driver's max heap and Spark's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--work", required=True, help="folder for Spark's event log and local dir")
    ap.add_argument("--json", required=True)
    ap.add_argument("--segment-bytes", type=int, default=32 << 20)
    args = ap.parse_args()
    out: dict = {"success": False, "driver_memory_env": os.environ.get("SPARK_DRIVER_MEMORY")}
    try:
        from compaction_assets.cleaning import engine
        from compaction_assets.store.log_store import LogStore

        from . import metrics
        from .contenders import LOG_NAME, bench_spark_conf, start_spark
        from .gen import NOW, topic_config

        event_dir = os.path.join(args.work, "events")
        os.makedirs(event_dir, exist_ok=True)
        t = time.perf_counter()
        spark, info = start_spark(bench_spark_conf(event_dir, os.path.join(args.work, "spark-local"), None))
        out["spark_start_seconds"] = time.perf_counter() - t
        out["driver_max_heap"] = info["driver_max_heap"]
        out["spark_driver_memory"] = spark.sparkContext.getConf().get("spark.driver.memory", "(default 1g)")
        handle = LogStore(args.store, gc_grace_s=0).log(LOG_NAME)
        before = handle.manifest()
        cfg = topic_config(args.segment_bytes)
        out["records_before"] = before.total_records
        t0_ms = metrics.wall_ms()
        t = time.perf_counter()
        report = engine.run(handle, cfg, NOW, spark=spark, force=True, gc=False)
        out["seconds"] = time.perf_counter() - t
        t1_ms = metrics.wall_ms()
        out["engine"] = report.stats.as_dict() if report.stats else None
        out["cleaned"] = report.cleaned
        out["records_after"] = handle.manifest().total_records
        app_id = info["app_id"]
        spark.stop()
        events = metrics.read_events(metrics.event_log_files(event_dir, app_id))
        out["spark"] = metrics.figures_between(events, t0_ms, t1_ms).as_dict()
        out["success"] = bool(report.cleaned)
    except BaseException as exc:  # report any failure (an OutOfMemoryError included) as data
        out["error"] = f"{type(exc).__name__}: {str(exc).strip()[:2000]}"
        out["traceback"] = traceback.format_exc()[-4000:]
    with open(args.json, "w") as f:
        json.dump(out, f, indent=2)
    raise SystemExit(0 if out["success"] else 1)


if __name__ == "__main__":
    main()
