"""The changes feed's cost (issue 56): `python -m bench.changes --records 2000000 --keys 500000`.

On a fresh seeded log (bench/gen.py, no cleaning: a commit builds the latest state itself), the table's
first commit (a backfill), then a change of 1% of the records (gen.py's updates: 90% to random existing
keys, 10% new keys, 5% tombstones) committed, then one of 0.1%. For each change, the CPU seconds (user +
sys of this process, the best of `--repeat`) of `changes` from the snapshot before it to the one after
(reading the changed files, table/reading/feed.py) and of `scan_changes` (both snapshots scanned whole), with
the counts and the data files each read. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from bench import gen
from compaction_assets.store.log_store import LogStore
from compaction_assets.table import changes
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.reading.feed import Changes, scan_changes
from compaction_assets.table.reading.read import open_table
from compaction_assets.topics.config import build_config


def _cpu(run: Callable[[], Changes], repeat: int) -> tuple[float, Changes]:
    """The least CPU seconds of `repeat` runs, and the last run's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        result = run()
        best = min(best, time.process_time() - start)
    assert result is not None
    return round(best, 3), result


def _measure(handle, before: int, after: int, repeat: int) -> dict:
    table, _ = open_table(handle.st, "bench")
    files_cpu, found = _cpu(lambda: changes(table, before, after), repeat)
    scan_cpu, whole = _cpu(lambda: scan_changes(table, before, after), repeat)
    assert whole.upserts.equals(found.upserts) and whole.deletes.equals(found.deletes)
    return {
        "upserts": len(found.upserts),
        "deletes": len(found.deletes),
        "changes_cpu_s": files_cpu,
        "changes_files_read": found.files_read,
        "scan_changes_cpu_s": scan_cpu,
        "scan_changes_files_read": whole.files_read,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--keys", type=int, default=500_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--work", default=None, help="a folder for the store (default: a temporary one)")
    args = p.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="bench-changes-")
    shutil.rmtree(os.path.join(work, "store"), ignore_errors=True)
    cfg = build_config({"segment.bytes": 32 * 2**20})
    handle = LogStore(os.path.join(work, "store"), gc_grace_s=0).log("bench-0")
    gen.generate(handle, cfg, args.records, args.keys, args.value_bytes, 20240601)
    snapshots = [commit_log(handle, cfg).snapshot_id]
    for seed, share in ((1, 100), (2, 1000)):
        gen.append_updates(handle, cfg, args.records // share, args.keys, args.value_bytes, seed)
        snapshots.append(commit_log(handle, cfg).snapshot_id)
    table, _ = open_table(handle.st, "bench")
    first_cpu, everything = _cpu(lambda: changes(table, None, snapshots[0]), 1)
    out = {
        "records": args.records,
        "keys": args.keys,
        "table_rows": len(everything.upserts),
        "from_nothing_cpu_s": first_cpu,
        "after_1pct": _measure(handle, snapshots[0], snapshots[1], args.repeat),
        "after_0.1pct": _measure(handle, snapshots[1], snapshots[2], args.repeat),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
