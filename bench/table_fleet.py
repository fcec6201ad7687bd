"""The topic tables' cost in a fleet (issue 31): `python -m bench.table_fleet --logs 50 --topics 5`.

A fleet of seeded logs (bench/gen.py, `--records` each over records / 10 keys, 100-byte values), the
topics' partitions spread evenly, cleaned with `engine.run_many` as a batch run does (its wall / logs is
the fleet's per-log time), then each topic's table committed three ways, each on its own copy of the
cleaned store: one log at a time (the old batch path), by `TopicCommits` from as many threads as the
batch cleans at once (the batch path), and with `commit_logs`, one snapshot per topic (`table commit`).
Each way commits twice: the backfill, then after 1% new records in every log (the steady state). Prints
one JSON object: seconds per log of each, and the snapshots each made.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench import gen
from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.log.config import build_config
from compaction_assets.log.store import LogStore
from compaction_assets.table.commit import LogCommit, commit_log, commit_logs
from compaction_assets.table.group import TopicCommits
from compaction_assets.table.read import open_table


def _one_at_a_time(handles, cfg) -> None:
    for h in handles:
        commit_log(h, cfg)


def _group_commits(handles, cfg) -> None:
    tables = TopicCommits()
    with ThreadPoolExecutor(settings.current().clean_concurrency) as pool:
        list(pool.map(lambda h: tables.commit(h, cfg), handles))


def _per_topic(handles, cfg) -> None:
    topics: dict[str, list] = {}
    for h in handles:
        topics.setdefault(h.name.rsplit("-", 1)[0], []).append(LogCommit(h, cfg))
    for logs in topics.values():
        commit_logs(logs)


WAYS = {"one_log_at_a_time": _one_at_a_time, "group_commits": _group_commits, "one_snapshot_per_topic": _per_topic}


def _clean(store: LogStore, names: list[str], cfg, spark) -> float:
    start = time.perf_counter()
    engine.run_many([(store.log(n), cfg) for n in names], gen.NOW, spark=lambda: spark, force=True,
                    concurrency=settings.current().clean_concurrency)
    return time.perf_counter() - start


def _way(name: str, work: str, v1: str, v2: str, names: list[str], topics: list[str], cfg) -> dict:
    root = os.path.join(work, name)
    shutil.copytree(v1, root)
    store = LogStore(root, gc_grace_s=0)
    out = {}
    for round_ in ("backfill", "after_1pct"):
        if round_ == "after_1pct":
            for n in names:   # the logs as the second cleaning left them; the tables as the first commit did
                shutil.rmtree(os.path.join(root, n))
                shutil.copytree(os.path.join(v2, n), os.path.join(root, n))
        handles = [store.log(n) for n in names]
        start = time.perf_counter()
        WAYS[name](handles, cfg)
        seconds = time.perf_counter() - start
        out[round_] = {"seconds": round(seconds, 2), "per_log": round(seconds / len(names), 3)}
    out["snapshots"] = sum(len(open_table(store.storage, t)[0].snapshots()) for t in topics)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--logs", type=int, default=50)
    p.add_argument("--topics", type=int, default=5)
    p.add_argument("--records", type=int, default=5_000)
    p.add_argument("--work", default=None, help="a folder for the stores (default: a temporary one)")
    args = p.parse_args()
    from compaction_assets.spark import get_spark

    work = args.work or tempfile.mkdtemp(prefix="bench-table-fleet-")
    shutil.rmtree(work, ignore_errors=True)
    cfg = build_config({"segment.bytes": 2**20})
    topics = [f"topic{t}" for t in range(args.topics)]
    names = [f"{topics[i % args.topics]}-{i // args.topics}" for i in range(args.logs)]
    base, keys = LogStore(os.path.join(work, "base"), gc_grace_s=0), max(1, args.records // 10)
    for i, n in enumerate(names):
        gen.generate(base.log(n), cfg, args.records, keys, 100, 1000 + i)
    spark = get_spark()
    spark.range(1).count()
    clean = _clean(base, names, cfg, spark)
    shutil.copytree(base.location, os.path.join(work, "v1"))
    for i, n in enumerate(names):
        gen.append_updates(base.log(n), cfg, args.records // 100, keys, 100, 2000 + i)
    clean_again = _clean(base, names, cfg, spark)
    ways = {w: _way(w, work, os.path.join(work, "v1"), base.location, names, topics, cfg) for w in WAYS}
    print(json.dumps({"logs": args.logs, "topics": args.topics, "records": args.records,
                      "clean_concurrency": settings.current().clean_concurrency,
                      "fleet_clean_per_log": round(clean / args.logs, 3),
                      "fleet_clean_after_1pct_per_log": round(clean_again / args.logs, 3), **ways}, indent=2))


if __name__ == "__main__":
    main()
