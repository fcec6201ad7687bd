"""What sending a log's columns from Spark's JVM to its Python workers (`mapInArrow`) costs, column set by
column set: the cause of most of the Spark table commit's CPU before 2026-12-08 (docs/performance.md).

`python -m bench.spark_arrow_columns STORE [--segments 2]`

STORE holds a log `bench-0` (bench/table_paths.py's seeded log under `--work`). Every column set is read
from the first `--segments` segments and counted by a Python worker, in one warm local session (the first
set is run once to warm the JVM and the workers). CPU seconds of the process tree (psutil), wall seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import pyarrow as pa


def _count(batches):
    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pylist([{"n": rows}])


def main() -> None:
    from pyspark.sql import functions as F

    from bench.table_paths import Tree
    from compaction_assets.log.spark_reads import read_segments
    from compaction_assets.spark import get_spark
    from compaction_assets.store.log_store import LogStore

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("store")
    p.add_argument("--segments", type=int, default=2)
    args = p.parse_args()
    handle = LogStore(args.store, gc_grace_s=0).log("bench-0")
    tree = Tree()
    spark = get_spark()
    manifest = handle.manifest()
    df = read_segments(spark, handle, manifest, list(enumerate(manifest.segments))[: args.segments])
    sets = {
        "warm-up (key)": [F.col("key")],
        "key, offset, value": [F.col("key"), F.col("offset"), F.col("value")],
        "key, headers (list of structs)": [F.col("key"), F.col("headers")],
        "key, headers as to_json text": [F.col("key"), F.to_json("headers").alias("headers")],
    }
    for name, columns in sets.items():
        cpu, start = tree.cpu(), time.perf_counter()
        rows = df.select(*columns).mapInArrow(_count, "n long").toArrow().column("n").to_pylist()
        figures = {"cpu_s": round(tree.cpu() - cpu, 1), "wall_s": round(time.perf_counter() - start, 1)}
        print(json.dumps({"columns": name, "rows": sum(rows), **figures}), flush=True)


if __name__ == "__main__":
    main()
