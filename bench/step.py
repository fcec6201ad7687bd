"""One benchmark step in its own process, as a cron job or Dagster's run launcher would run it.

    python -m bench.step OP --store DIR [--out DIR] [--json FILE]

OP: `session` (start Spark and run one trivial job), `copy` (C: Spark reads the log's segment files and
writes them back), `window` (B: the naive `row_number()` window dedup of those files, written), `clean`
(A or D: `engine.run`, forced, the benchmark's clock), `latest-state` (the key -> value table written as
Parquet, as the CLI writes it: with Arrow and no Spark when the log fits in the process), `plan` (the dry
run from metadata) and `plan-detail` (the key-level dry run), `fleet` (`engine.run_many` over every log
of the store, as `clean --all`).
Prints one JSON line: seconds in process, Spark start seconds, Spark jobs (None under Spark Connect).
The session is the product's (`compaction_assets.spark.get_spark`): SPARK_REMOTE makes it a Connect client.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import os
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("--store", required=True)
    ap.add_argument("--out")
    ap.add_argument("--json")
    ap.add_argument("--concurrency", type=int, default=None, help="fleet: cleanings at once (the product's default)")
    ap.add_argument("--segment-bytes", type=int, default=1 << 20, help="segment.bytes of the measured log")
    ap.add_argument(
        "--tuning",
        default="{}",
        help="clean, fleet: CleanerTuning fields as JSON (bench/paths.py "
        "turns a fast path off this way); the product's tuning otherwise",
    )
    ap.add_argument(
        "--state",
        choices=("product", "table", "spark"),
        default="product",
        help="latest-state: the product's path, the state built as one table here, or by a Spark job",
    )
    args = ap.parse_args()

    from compaction_assets import settings
    from compaction_assets.cleaning import engine
    from compaction_assets.cleaning.tuning import DEFAULT_TUNING
    from compaction_assets.store.log_store import LogStore

    from .gen import NOW, topic_config
    from .jobs import JobCounter
    from .modes import LOG_NAME

    # as the product's command's process does (cli.context.settle_imports), without importing the CLI's
    # package: that would add the import of every command (click's group) to the cleaning measured here
    gc.freeze()

    store = LogStore(args.store, gc_grace_s=0)
    cfg = topic_config(args.segment_bytes)
    tuning = tuning_of(args.tuning)
    out: dict = {"op": args.op}
    if args.op in ("plan",):  # metadata only: no Spark at all
        t = time.perf_counter()
        dry = engine.dry_run(store.log(LOG_NAME), cfg, NOW, force=True, detail=False)
        out.update(seconds=time.perf_counter() - t, spark_start_seconds=0.0, jobs=0, would_clean=dry.would_clean)
        print(json.dumps(out))
        return
    handle = store.log(LOG_NAME)
    # the latest state's twins (bench/paths.py): built as one table here, or by a Spark job (no memory
    # to spare), instead of the path the product takes
    share = 0.0 if args.state == "spark" else DEFAULT_TUNING.driver_memory_share
    if args.op == "latest-state":
        from compaction_assets.state.latest_state import latest_state_table, write_latest_state, written_here
        from compaction_assets.store.fs import Storage

        if written_here(handle, cfg, handle.manifest(), share):  # as the CLI does: Arrow here, no Spark
            t = time.perf_counter()
            st = Storage.open(args.out)
            whole = latest_state_table(handle, cfg, ordered=False) if args.state == "table" else None
            out["rows"] = write_latest_state(handle, cfg, st, st.root, spark=None, state=whole)
            out.update(
                seconds=time.perf_counter() - t,
                spark_start_seconds=0.0,
                jobs=0,
                max_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            )
            print(json.dumps(out))
            return
    from compaction_assets.spark import get_spark
    from compaction_assets.spark.lazy_session import settings_session

    t = time.perf_counter()
    if args.op in ("clean", "fleet"):  # as the CLI: Spark starts inside the cleaning, if a path needs it
        spark = settings_session(get_spark)
    else:
        spark = get_spark()
    out["spark_start_seconds"] = time.perf_counter() - t
    t = time.perf_counter()
    with JobCounter(spark) as jobs:
        if args.op == "session":
            spark.range(1).collect()
        elif args.op == "copy":
            handle = store.log(LOG_NAME)
            uris = [handle.spark_uri(f.name) for f in handle.manifest().files()]
            spark.read.parquet(*uris).write.parquet(args.out)
        elif args.op == "window":  # B: the naive dedup a user would write (no Kafka semantics)
            from .contenders import naive_window

            handle = store.log(LOG_NAME)
            naive_window(spark, [handle.spark_uri(f.name) for f in handle.manifest().files()], args.out)
        elif args.op == "clean":
            report = engine.run(store.log(LOG_NAME), cfg, NOW, spark=spark, force=True, gc=False, tuning=tuning)
            out["route"] = dataclasses.asdict(report.route) if report.route else None
            out["stats"] = report.stats.as_dict() if report.stats else None
        elif args.op == "latest-state":
            from compaction_assets.state.latest_state import write_latest_state
            from compaction_assets.store.fs import Storage

            st = Storage.open(args.out)
            out["rows"] = write_latest_state(handle, cfg, st, st.root, lambda: spark, share=share)
        elif args.op == "plan-detail":
            dry = engine.dry_run(store.log(LOG_NAME), cfg, NOW, spark=spark, force=True, detail=True)
            out["superseded"] = dry.superseded.records if dry.superseded else None
        elif args.op == "fleet":
            items = [(store.log(name), topic_config(1 << 20)) for name in store.logs()]  # the fleet's size
            concurrency = args.concurrency or settings.current().clean_concurrency
            results = engine.run_many(items, NOW, spark=spark, force=True, concurrency=concurrency, tuning=tuning)
            out["logs"] = len(results)
            out["failed"] = sum(1 for r in results if r.error is not None)
        else:
            raise SystemExit(f"unknown op {args.op!r}")
    out["seconds"] = time.perf_counter() - t
    out["jobs"] = jobs.result.jobs
    # this process's peak memory: the Python side of the driver (what a collected decision adds to)
    out["max_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the local JVM's peak (a child of this process; none under Spark Connect, whose server reports its own)
    out["jvm_max_rss_mib"] = children_peak_rss_mib()
    print(json.dumps(out, default=str))


def children_peak_rss_mib() -> float | None:
    """The largest peak resident memory (VmHWM) among this process's live descendants, None if none."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    mine, grew = {os.getpid()}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in mine} - mine
        grew = bool(found)
        mine |= found
    from .sweep import peak_rss_mib

    peaks = [p for p in (peak_rss_mib(pid) for pid in mine - {os.getpid()}) if p is not None]
    return max(peaks) if peaks else None


def tuning_of(fields: str):
    """The product's CleanerTuning with the fields of a JSON object replaced (`reads` takes an object too)."""
    from dataclasses import replace

    from compaction_assets.cleaning.tuning import DEFAULT_TUNING
    from compaction_assets.log.spark_reads import ReadPaths

    changes = json.loads(fields)
    if "reads" in changes:
        changes["reads"] = ReadPaths(**changes["reads"])
    return replace(DEFAULT_TUNING, **changes)


if __name__ == "__main__":
    main()
