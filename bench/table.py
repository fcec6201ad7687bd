"""The topic table's costs (issue 31): `python -m bench.table --records 5000000 --keys 500000`.

On a fresh seeded log (bench/gen.py): A, a forced cleaning (Spark already started, as on a warm server);
the first table write (backfill) of the cleaned log; then 1% new records (bench/gen.py's updates: 90% to
random existing keys, 10% new keys, 5% tombstones), a forced cleaning, and the table commit after it; then
the same for a change of 0.1%. Prints one JSON object: seconds, bytes written against the table's bytes,
files rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

from bench import gen
from compaction_assets.cleaning import engine
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.reading.read import open_table
from compaction_assets.topics.config import build_config


def _table_bytes(handle) -> int:
    table, _ = open_table(handle.st, "bench")
    return sum(table.inspect.files().column("file_size_in_bytes").to_pylist())


def _commit(handle, cfg) -> dict:
    start = time.perf_counter()
    r = commit_log(handle, cfg)
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 2),
        "rows_added": r.rows_added,
        "rows_deleted": r.rows_deleted,
        "files_removed": r.files_removed,
        "files_added": r.files_added,
        "delete_files_added": r.delete_files_added,
        "buckets_rewritten": r.rewrite.buckets if r.rewrite else 0,
        "bytes_written": r.bytes_written,
        "records_read": r.records_read,
        "from_tail": r.from_tail,
        "table_bytes": _table_bytes(handle),
    }


def _change(handle, cfg, spark, records: int, keys: int, value_bytes: int, seed: int) -> dict:
    gen.append_updates(handle, cfg, records, keys, value_bytes, seed)
    engine.run(handle, cfg, spark=lambda: spark, force=True)
    out = _commit(handle, cfg)
    out["bytes_fraction"] = round(out["bytes_written"] / out["table_bytes"], 3)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=5_000_000)
    p.add_argument("--keys", type=int, default=500_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--work", default=None, help="a folder for the store (default: a temporary one)")
    args = p.parse_args()
    from compaction_assets.spark import get_spark

    work = args.work or tempfile.mkdtemp(prefix="bench-table-")
    shutil.rmtree(os.path.join(work, "store"), ignore_errors=True)
    cfg = build_config({"segment.bytes": 32 * 2**20})
    handle = LogStore(os.path.join(work, "store"), gc_grace_s=0).log("bench-0")
    gen.generate(handle, cfg, args.records, args.keys, args.value_bytes, 20240601)
    spark = get_spark()
    spark.range(1).count()
    start = time.perf_counter()
    engine.run(handle, cfg, spark=lambda: spark, force=True)
    a = time.perf_counter() - start
    first = _commit(handle, cfg)
    one = _change(handle, cfg, spark, args.records // 100, args.keys, args.value_bytes, 1)
    tenth = _change(handle, cfg, spark, args.records // 1000, args.keys, args.value_bytes, 2)
    print(
        json.dumps(
            {
                "records": args.records,
                "keys": args.keys,
                "A_seconds": round(a, 2),
                "first_write": first,
                "first_write_over_A": round(first["seconds"] / a, 2),
                "after_1pct": one,
                "after_1pct_over_A": round(one["seconds"] / a, 2),
                "after_0.1pct": tenth,
                "after_0.1pct_over_A": round(tenth["seconds"] / a, 2),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
