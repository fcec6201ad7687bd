"""A table commit in this process against the same commit through Spark tasks (issue 55): CPU seconds and peak RSS.

`python -m bench.table_paths --records 2000000 --keys 1000000 --rounds 3`

One seeded log (bench/gen.py) under the timestamp strategy, so that every commit compares the whole latest
state with the table (no commit from the log's tail). Each round runs, for each path in turn (interleaved), a
fresh process on a fresh copy of the log: the first commit (the backfill), then 1% new records (bench/gen.py's
updates) and the commit after them. The path is forced by COMPACTION_TABLE_MAX_STATE_BYTES: above the log's
visible bytes for `here`, 1 for `spark`. Spark starts inside the Spark commit (a cold JVM: local[*]).

Per commit: wall seconds, CPU seconds of the process tree (the process, the JVM and Spark's Python workers,
every thread, from psutil) and peak RSS sampled every 0.1 s: of the product's process alone and of the whole
tree. Prints one JSON object: each round's figures and the medians per path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CONFIG = {"segment.bytes": 32 * 2**20, "compaction.strategy": "timestamp"}
PATHS = {"here": str(1 << 50), "spark": "1"}


class Tree:
    """The CPU seconds and the peak RSS of this process and its descendants, sampled in a thread."""

    def __init__(self) -> None:
        import psutil

        self.me = psutil.Process()
        self.peak_self = self.peak_tree = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _processes(self):
        return [self.me, *self.me.children(recursive=True)]

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            total = 0
            for p in self._processes():
                try:
                    rss = p.memory_info().rss
                except Exception:  # a worker that exited between the listing and the reading
                    continue
                total += rss
                if p.pid == self.me.pid:
                    self.peak_self = max(self.peak_self, rss)
            self.peak_tree = max(self.peak_tree, total)

    def cpu(self) -> float:
        """User + system seconds of the live tree, with the children each has reaped."""
        seconds = 0.0
        for p in self._processes():
            try:
                t = p.cpu_times()
            except Exception:
                continue
            seconds += t.user + t.system + t.children_user + t.children_system
        return seconds

    def reset(self) -> None:
        self.peak_self = self.peak_tree = 0


def _measured(tree: Tree, step) -> dict:
    tree.reset()
    cpu, start = tree.cpu(), time.perf_counter()
    r = step()
    return {
        "wall_s": round(time.perf_counter() - start, 2),
        "cpu_s": round(tree.cpu() - cpu, 2),
        "peak_rss_self_mib": round(tree.peak_self / 2**20),
        "peak_rss_tree_mib": round(tree.peak_tree / 2**20),
        "path": r.path,
        "rows_added": r.rows_added,
        "rows_masked": r.rows_masked,
        "data_files": r.files_added,
        "delete_files": r.delete_files_added,
    }


def run_one(store: str, records: int, keys: int, value_bytes: int) -> dict:
    """In this process (a child): the first commit, 1% new records, the commit after them."""
    from bench import gen
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.table.commit.commit import commit_log
    from compaction_assets.topics.config import build_config

    cfg = build_config(CONFIG)
    handle = LogStore(store, gc_grace_s=0).log("bench-0")
    tree = Tree()
    first = _measured(tree, lambda: commit_log(handle, cfg))
    gen.append_updates(handle, cfg, records // 100, keys, value_bytes, 1)
    change = _measured(tree, lambda: commit_log(handle, cfg))
    return {"first": first, "change": change, "visible_mib": round(handle.manifest().total_size / 2**20)}


def _median(rounds: list[dict], path: str, step: str, figure: str) -> float:
    return round(statistics.median(r[path][step][figure] for r in rounds), 2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", default=None, help="a folder for the stores (default: a temporary one)")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # a round's store: run it here
    args = p.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.records, args.keys, args.value_bytes)))
        return
    from bench import gen
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    work = args.work or tempfile.mkdtemp(prefix="bench-table-paths-")
    base = os.path.join(work, f"base-{args.records}-{args.keys}-{args.value_bytes}")
    handle = LogStore(base, gc_grace_s=0).log("bench-0")
    if not handle.exists():  # the seeded log, generated once per size in `--work` (the same seed each time)
        gen.generate(handle, build_config(CONFIG), args.records, args.keys, args.value_bytes, 20240601)
    rounds = []
    for _ in range(args.rounds):
        one = {}
        for path, bound in PATHS.items():
            store = os.path.join(work, f"run-{path}")
            shutil.rmtree(store, ignore_errors=True)
            shutil.copytree(base, store)
            env = {**os.environ, "COMPACTION_TABLE_MAX_STATE_BYTES": bound}
            argv = [sys.executable, "-m", "bench.table_paths", "--child", store, "--records", str(args.records)]
            argv += ["--keys", str(args.keys), "--value-bytes", str(args.value_bytes)]
            out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
            one[path] = json.loads(out.strip().splitlines()[-1])
            print(json.dumps({path: one[path]}), file=sys.stderr, flush=True)  # each run as it lands
            shutil.rmtree(store, ignore_errors=True)
        rounds.append(one)
    figures = ("wall_s", "cpu_s", "peak_rss_self_mib", "peak_rss_tree_mib")
    medians = {
        path: {step: {f: _median(rounds, path, step, f) for f in figures} for step in ("first", "change")}
        for path in PATHS
    }
    print(json.dumps({"records": args.records, "keys": args.keys, "medians": medians, "rounds": rounds}, indent=1))


if __name__ == "__main__":
    main()
