"""The topic tables' cost in a fleet (issue 31): `python -m bench.table_fleet --logs 50 --topics 5`.

A fleet of seeded logs (bench/gen.py, `--records` each over records / 10 keys, 100-byte values; the
topics' partitions, listed by name as a store lists them), cleaned with `engine.run_many` as a batch run
does, twice on copies of the same files: cleanings only, and cleanings whose logs go to their topics'
tables as a batch's do (`TopicBatch`: each log's latest state built and queued in run_many's `done`
callback as it finishes, then each topic committed once, in one snapshot, after the cleanings). The
difference of the two walls per log is what table commits add to the fleet's per-log time; on a loaded
machine it swings by a few seconds a fleet, so the difference of this process's CPU seconds is printed
too (the tables' work is Python and Arrow here; the cleanings' is mostly the JVM's). A first fleet of
the same logs warms the JVM up before both (it also gives the commits alone below their logs).
Then the backfill of every table, then 1% new records in every log, cleaned, and the incremental
commits. The commits alone are also timed on copies: one log at a time, and `commit_logs`, one snapshot
per topic (`compaction table commit`). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench import gen
from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.catalog import locate, open_catalog
from compaction_assets.table.commit.commit import LogCommit, commit_log, commit_logs
from compaction_assets.table.commit.group import TopicBatch
from compaction_assets.table.reading.read import open_table
from compaction_assets.topics.config import build_config


def _one_at_a_time(handles, cfg) -> None:
    for h in handles:
        commit_log(h, cfg)


def _per_topic(handles, cfg) -> None:
    topics: dict[str, list] = {}
    for h in handles:
        topics.setdefault(h.name.rsplit("-", 1)[0], []).append(LogCommit(h, cfg))
    for logs in topics.values():
        commit_logs(logs)


WAYS = {"one_log_at_a_time": _one_at_a_time, "one_snapshot_per_topic": _per_topic}


def _queue_states(store: LogStore, cfg, tables: TopicBatch, spent: list[float]) -> Callable[[Any], None]:
    """run_many's `done` callback of one round: each cleaned log's latest state queued in that round's
    `tables`, the time it took appended to `spent` (a function of its own so each round binds its own)."""

    def done(result) -> None:
        if result.error is None:
            start = time.perf_counter()
            tables.add(store.log(result.log), cfg)
            spent.append(time.perf_counter() - start)

    return done


def _fleet(root: str, names: list[str], cfg, spark, keys: int, records: int, commit: bool) -> dict:
    """Two rounds of the fleet's cleanings (the second after 1% new records), with table commits or not."""
    store, out = LogStore(root, gc_grace_s=0), {}
    if commit:  # pyiceberg's imports and the catalog: once per process (a batch run's), not per log
        start = time.perf_counter()
        open_catalog(locate(store.storage))
        out["catalog_open_seconds"] = round(time.perf_counter() - start, 2)
    for round_ in ("first", "after_1pct"):
        if round_ == "after_1pct":
            for i, n in enumerate(names):
                gen.append_updates(store.log(n), cfg, records // 100, keys, 100, 2000 + i)
        tables, spent = TopicBatch(settings.current().tables.pending_bytes), []
        done = _queue_states(store, cfg, tables, spent) if commit else None
        start, cpu = time.perf_counter(), time.process_time()
        engine.run_many(
            [(store.log(n), cfg) for n in names],
            gen.NOW,
            spark=lambda: spark,
            force=True,
            concurrency=settings.current().clean_concurrency,
            done=done,
        )
        cleaned = time.perf_counter()
        failed = [o.log for o in tables.commit().values() if o.error is not None] if commit else []
        end = time.perf_counter()
        wall = end - start
        if failed:
            raise SystemExit(f"table commits failed: {failed}")
        # this process's CPU (the JVM's is not in it): the tables' work shows here whatever else loads the machine
        out[round_] = {
            "wall": round(wall, 2),
            "per_log": round(wall / len(names), 3),
            "python_cpu_seconds": round(time.process_time() - cpu, 2),
            "states_queued_seconds_per_log": round(sum(spent) / len(names), 3),
            "topic_commits_seconds": round(end - cleaned, 2),
        }
    return out


def _way(name: str, work: str, v1: str, v2: str, names: list[str], topics: list[str], cfg) -> dict:
    root = os.path.join(work, name)
    shutil.copytree(v1, root)
    store = LogStore(root, gc_grace_s=0)
    out = {}
    for round_ in ("backfill", "after_1pct"):
        if round_ == "after_1pct":
            for n in names:  # the logs as the second cleaning left them; the tables as the first commit did
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
    names = sorted(f"{topics[i % args.topics]}-{i // args.topics}" for i in range(args.logs))
    base, keys = LogStore(os.path.join(work, "base"), gc_grace_s=0), max(1, args.records // 10)
    for i, n in enumerate(names):
        gen.generate(base.log(n), cfg, args.records, keys, 100, 1000 + i)
    for copy in ("cleanings", "cleanings_and_tables"):
        shutil.copytree(base.location, os.path.join(work, copy))
    spark = get_spark()
    spark.range(1).count()
    # the logs at their first cleaning (v1), for the commits alone below; cleaned first, it warms the JVM up
    # for both fleets (the first fleet of a process runs in a colder JVM: that would favour the second one)
    v1 = os.path.join(work, "v1")
    shutil.copytree(base.location, v1)
    engine.run_many(
        [(LogStore(v1, gc_grace_s=0).log(n), cfg) for n in names],
        gen.NOW,
        spark=lambda: spark,
        force=True,
        concurrency=settings.current().clean_concurrency,
    )
    fleets = {
        "cleanings_and_tables": _fleet(
            os.path.join(work, "cleanings_and_tables"), names, cfg, spark, keys, args.records, True
        ),
        "cleanings": _fleet(os.path.join(work, "cleanings"), names, cfg, spark, keys, args.records, False),
    }
    added = {
        r: round((fleets["cleanings_and_tables"][r]["wall"] - fleets["cleanings"][r]["wall"]) / args.logs, 3)
        for r in ("first", "after_1pct")
    }
    cpu_added = {
        r: round(
            (fleets["cleanings_and_tables"][r]["python_cpu_seconds"] - fleets["cleanings"][r]["python_cpu_seconds"])
            / args.logs,
            3,
        )
        for r in ("first", "after_1pct")
    }
    # the commits alone: the logs at the first cleaning (v1), then at the second (the cleanings' copy now)
    ways = {w: _way(w, work, v1, os.path.join(work, "cleanings"), names, topics, cfg) for w in WAYS}
    print(
        json.dumps(
            {
                "logs": args.logs,
                "topics": args.topics,
                "records": args.records,
                "clean_concurrency": settings.current().clean_concurrency,
                **fleets,
                "tables_add_per_log": added,
                "tables_add_python_cpu_per_log": cpu_added,
                **ways,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
