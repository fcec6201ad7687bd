"""Object-store requests per operation, measured on a real S3 server (tests/s3_server.py).

    .venv/bin/python scripts/object_store_requests.py [--batches N]

Counts the driver's GET/PUT/LIST/DELETE for an ingest (one append), a plan, a cleaning and a sensor
tick over an unchanged log (`LogHandle.latest_version`), as the log's history grows. Requests made
by Spark's Python workers (reading and rewriting segment files) are counted apart, as files touched.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.s3_server import start_s3_server


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    server = start_s3_server()
    try:
        os.environ.update(server.env)
        from compaction_assets.cleaning import engine
        from compaction_assets.log import writer
        from compaction_assets.planning.planner import evaluate
        from compaction_assets.spark import get_spark, spark_conf_from_env
        from compaction_assets.store.log_store import LogStore
        from compaction_assets.topics.config import build_config

        spark = get_spark(spark_conf_from_env({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}))
        store = LogStore(f"s3://{server.new_bucket()}/store", gc_grace_s=3600)
        h = store.log("orders-0")
        config = build_config({"segment.bytes": 20_000})
        counts = h.st.counts

        def measure(label, fn):
            before = counts.copy()
            fn()
            d = counts.minus(before)
            print(f"| {label} | {d.get} | {d.put} | {d.list} | {d.delete} | {d.total()} |")

        print("| operation | GET | PUT | LIST | DELETE | total |\n|---|---|---|---|---|---|")
        for b in range(args.batches):
            rows = [{"key": f"k{i % 500}", "value": f"v{b}-{i}", "timestamp": 1000 + b} for i in range(1000)]
            if b in (0, args.batches - 1):
                measure(f"ingest of 1,000 records (batch {b + 1})", functools.partial(writer.append, h, config, rows))
            else:
                writer.append(h, config, rows)
        measure("sensor tick over the unchanged log (latest_version)", h.latest_version)
        measure("plan (manifest read + evaluate)", lambda: evaluate(h.manifest(), config, 10**12))
        measure(
            f"cleaning after {args.batches} batches (driver)",
            lambda: engine.run(h, config, 10**12, spark=spark, force=True),
        )
        rows = [{"key": f"k{i % 500}", "value": f"x-{i}", "timestamp": 5000} for i in range(1000)]
        writer.append(h, config, rows)
        writer.roll(h)
        measure(
            "incremental cleaning after one more batch (driver)",
            lambda: engine.run(h, config, 10**12, spark=spark, force=True),
        )
        m = h.manifest()
        print(f"\nlog: {len(m.segments)} segments, {len(m.files())} files, version {m.version}")
        spark.stop()
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
