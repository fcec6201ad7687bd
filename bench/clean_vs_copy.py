"""Time a full cleaning of one log against Spark reading and rewriting the same files (same session).

    .venv/bin/python bench/clean_vs_copy.py [--records 1000000] [--keys 100000] [--value-bytes 100]

Prints wall times (median of --runs) and the ratio clean / copy. Not part of the test run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from compaction_assets import engine, log_ops  # noqa: E402
from compaction_assets.config import build_config  # noqa: E402
from compaction_assets.spark import get_spark  # noqa: E402
from compaction_assets.store import LogStore  # noqa: E402


def generate(handle, cfg, records: int, keys: int, value_bytes: int, seed: int = 1, chunk: int = 250_000):
    rng = np.random.default_rng(seed)
    payload = rng.bytes(value_bytes * 1024)
    ts0 = 1_700_000_000_000
    for start in range(0, records, chunk):
        n = min(chunk, records - start)
        k = rng.integers(0, keys, n)
        tomb = rng.random(n) < 0.05
        values = [None if t else payload[(i % 1000):(i % 1000) + value_bytes] for i, t in zip(k, tomb)]
        table = pa.table({"key": pa.array([b"key-%08d" % i for i in k], pa.binary()),
                          "value": pa.array(values, pa.binary()),
                          "timestamp": pa.array(ts0 + start + np.arange(n), pa.int64())})
        log_ops.append(handle, cfg, table)
    log_ops.roll(handle)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    spark = get_spark()
    root = tempfile.mkdtemp(prefix="bench-")
    cfg = build_config({"segment.bytes": 32 * 1024 * 1024})
    try:
        src = LogStore(os.path.join(root, "src"), gc_grace_s=0).log("bench-0")
        t = time.monotonic()
        generate(src, cfg, args.records, args.keys, args.value_bytes)
        m = src.manifest()
        print(f"generated {m.total_records} records, {m.total_size / 1e6:.1f} MB logical, "
              f"{len(m.segments) - 1} sealed segments in {time.monotonic() - t:.1f}s", flush=True)
        clean_t, copy_t = [], []
        for run in range(args.runs):
            work = os.path.join(root, f"run{run}")
            shutil.copytree(os.path.join(root, "src"), work)
            handle = LogStore(work, gc_grace_s=0).log("bench-0")
            t = time.monotonic()
            rep = engine.run(handle, cfg, 1_800_000_000_000, spark=spark, gc=False)
            clean_t.append(time.monotonic() - t)
            uris = [handle.spark_uri(f.name) for f in m.files()]
            t = time.monotonic()
            spark.read.parquet(*uris).write.parquet(handle.spark_uri(f"copy-{run}"))
            copy_t.append(time.monotonic() - t)
            print(f"run {run}: clean {clean_t[-1]:.2f}s ({rep.stats['records_read']} -> "
                  f"{rep.stats['records_written']} records), copy {copy_t[-1]:.2f}s", flush=True)
        c, k = statistics.median(clean_t), statistics.median(copy_t)
        print(f"median: clean {c:.2f}s, read+rewrite {k:.2f}s, ratio clean/copy {c / k:.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
