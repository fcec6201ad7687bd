"""The subprocess side of tests/log/test_store_faults.py: engine work that a test SIGKILLs at chosen moments.

    python -m tests.fault_helpers clean ROOT LOG NOW CONFIG_JSON [--ttl S] [--force] [--gate]
    python -m tests.fault_helpers append ROOT LOG CONFIG_JSON N SEED [--ttl S]
    python -m tests.fault_helpers hold-lock ROOT LOG KIND TTL
    python -m tests.fault_helpers materialize LOG NOW [--gate]   (a Dagster run of the log's partition,
                            its store and topics from COMPACTION_*, its instance from DAGSTER_HOME)

Each prints one line per milestone on stdout (flushed), so that the test can kill it right after one:
    READY                   set-up done (Spark started for `clean`); with --gate the
                            helper then waits for a line on stdin before it starts the work
    START                   the engine call begins
    PROGRESS <message>      the cleaner's progress messages (deciding, rewriting, side tables)
    UPDATE <n>              the n-th manifest commit attempt of the log is about to happen
    UPDATED <n> <version>   ... and it returned (committed, nothing to commit, or `lost` to another writer)
    DONE <json>             the engine call returned
    LOCKED                  (hold-lock) the lease is held; the process then sleeps until killed
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def _instrument(handle) -> None:
    """Announce each manifest commit of this handle (the kill points around commits): every commit goes
    through `handle.commit`, whether the store's `update` or the cleaning's engine drives the tries."""
    original = handle.commit
    count = [0]

    def commit(attempt, new):
        count[0] += 1
        n = count[0]
        say(f"UPDATE {n}")
        result = original(attempt, new)
        say(f"UPDATED {n} {result.version if result is not None else 'lost'}")
        return result

    handle.commit = commit


def batch(n: int, seed: int, first_key: int = 0) -> list[dict]:
    """A deterministic batch of records (the test builds the same one to compare)."""
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        key = f"key-{first_key + rng.randrange(2000):05d}"
        value = None if rng.random() < 0.05 else (f"v{seed}-{i}-" + "x" * rng.randrange(40)).encode()
        out.append({"key": key, "value": value, "timestamp": 1 + rng.randrange(1_000_000)})
    return out


def small_spark():
    from compaction_assets.spark import get_spark, spark_conf_from_env

    return get_spark(
        spark_conf_from_env(
            {
                "spark.master": "local[1]",
                "spark.sql.shuffle.partitions": "2",
                "spark.ui.enabled": "false",
                "spark.driver.memory": "512m",
            }
        )
    )


def cmd_clean(args) -> None:
    from compaction_assets.cleaning import engine
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    config = build_config(json.loads(args.config))
    spark = small_spark()
    handle = LogStore(args.root, lock_ttl_s=args.ttl).log(args.log, must_exist=True)
    _instrument(handle)
    say("READY")
    if args.gate:
        sys.stdin.readline()
    say("START")
    report = engine.run(
        handle, config, args.now, spark=spark, force=args.force, progress=lambda msg: say(f"PROGRESS {msg}")
    )
    say("DONE " + json.dumps({"cleaned": report.cleaned, "reason": report.reason, "checkpoint": report.checkpoint}))


def cmd_append(args) -> None:
    import pyarrow as pa

    from compaction_assets.log import writer
    from compaction_assets.segments.records import records_to_table
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    config = build_config(json.loads(args.config))
    handle = LogStore(args.root, lock_ttl_s=args.ttl).log(args.log)
    table: pa.Table = records_to_table(batch(args.n, args.seed), "killed-append")
    _instrument(handle)
    say("READY")
    say("START")
    result = writer.append(handle, config, table, source="killed-append")
    say("DONE " + json.dumps({"records": result.records, "log_end_offset": result.log_end_offset}))


def cmd_materialize(args) -> None:
    import dagster as dg

    from compaction_assets.defs.assets import CleaningConfig, cleanable_range, compacted_log, latest_state, raw_segments
    from compaction_assets.defs.partitions import log_partitions
    from resources.log_store import LogStoreResource
    from resources.spark import make_spark_resource

    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions(log_partitions.name, [args.log])
    resources = {"log_store": LogStoreResource(), "pyspark": make_spark_resource()}  # as the code location builds them
    config = dg.RunConfig(
        {"cleanable_range": CleaningConfig(now_ms=args.now), "compacted_log": CleaningConfig(now_ms=args.now)},
        loggers={"console": {"config": {"log_level": "WARNING"}}},
    )
    say("READY")
    if args.gate:
        sys.stdin.readline()
    say("START")
    result = dg.materialize(
        [raw_segments, cleanable_range, compacted_log, latest_state],
        partition_key=args.log,
        resources=resources,
        instance=instance,
        run_config=config,
        raise_on_error=False,
    )
    errors = [
        str(event.event_specific_data.error.message)[:500]
        for event in result.get_step_failure_events()
        if event.event_specific_data is not None and event.event_specific_data.error is not None
    ]
    say("DONE " + json.dumps({"success": result.success, "errors": errors}))


def cmd_hold_lock(args) -> None:
    from compaction_assets.store.log_store import LogStore

    handle = LogStore(args.root).log(args.log)
    with handle.lock(args.kind, ttl_s=args.ttl, purpose="held by a test subprocess"):
        say("LOCKED")
        while True:
            time.sleep(3600)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.fault_helpers")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("clean")
    p.add_argument("root")
    p.add_argument("log")
    p.add_argument("now", type=int)
    p.add_argument("config")
    p.add_argument("--ttl", type=float, default=2.0)
    p.add_argument("--force", action="store_true")
    p.add_argument("--gate", action="store_true")
    p.set_defaults(func=cmd_clean)
    p = sub.add_parser("append")
    p.add_argument("root")
    p.add_argument("log")
    p.add_argument("config")
    p.add_argument("n", type=int)
    p.add_argument("seed", type=int)
    p.add_argument("--ttl", type=float, default=1.0)
    p.set_defaults(func=cmd_append)
    p = sub.add_parser("materialize")
    p.add_argument("log")
    p.add_argument("now", type=int)
    p.add_argument("--gate", action="store_true")
    p.set_defaults(func=cmd_materialize)
    p = sub.add_parser("hold-lock")
    p.add_argument("root")
    p.add_argument("log")
    p.add_argument("kind")
    p.add_argument("ttl", type=float)
    p.set_defaults(func=cmd_hold_lock)
    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
