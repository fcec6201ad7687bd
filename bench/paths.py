"""What each fast path of the cleaning wins: the same steps with the path on and off, interleaved.

    PYTHONPATH=. .venv/bin/python -m bench.paths [--records 5000000] [--keys 500000] [--segment-files 20]
                                                 [--fleet 50] [--fleet-records 20000] [--repeats 2] [--json FILE]

Warm (one Spark Connect server, as bench/modes.py's warm mode), every step its own process timed from
outside (bench/step.py with `--tuning`): A (a forced cleaning of the fresh log) and D (1% new records,
then a forced cleaning; `--new-share`) of one log, and the fleet of small logs (`run_many`), for the product's tuning
and for each variant that turns one fast path off (its general twin). Variants run in a rotated order
each round, so a machine whose load drifts weighs on all of them alike; compare each variant's ratio
to the product's in the same run. Offset strategy, as the benchmark's logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from compaction_assets.store.log_store import LogStore

from . import gen
from .modes import LOG_NAME, REPO, _free_port, build, copy_log, step

# each fast path off: the CleanerTuning fields that send the cleaning down its general twin
VARIANTS = {
    "product": {},
    "partial aggregation kept (distinct_skips_partial)": {"distinct_skips_partial": 1.01},
    "decision in Spark, not here (local_decision_max_rows)": {"local_decision_max_rows": -1},
    "decision cached, not collected (collect_*_max_rows)": {
        "collect_offset_decision_max_rows": -1,
        "collect_decision_max_rows": -1,
        "task_decision_max_rows": -1,
        "local_decision_max_rows": -1,
    },
    "decision cached, not in tasks (task_decision_max_rows)": {
        "task_decision_max_rows": -1,
        "local_decision_max_rows": -1,
    },
    "decision in tasks, not collected (collect_offset_decision_max_rows)": {
        "collect_offset_decision_max_rows": -1,
        "local_decision_max_rows": -1,
    },
    "decision collected at any size (collect_*_max_rows)": {
        "collect_offset_decision_max_rows": 1 << 62,
        "collect_decision_max_rows": 1 << 62,
        "local_decision_max_rows": -1,
    },
    "no probe of the prefix (probe_max_newer_rows)": {"probe_max_newer_rows": -1},
    "probe at any size (probe_max_newer_rows, incremental_max_dirty_rows)": {
        "probe_max_newer_rows": 1 << 62,
        "incremental_max_dirty_rows": 1 << 62,
    },
    "writes in Python workers (local_master_writes_here)": {"local_master_writes_here": False},
    "small writes not in the driver (driver_*_max_rows)": {"driver_rewrite_max_rows": -1, "driver_mark_max_rows": -1},
    "vector rebuilt whole (dead_vector_max_files)": {"dead_vector_max_files": 0},
    "stamps in one map (reads.stamp_bucket_files)": {"reads": {"stamp_bucket_files": 1 << 30}},
}
# the fleet's small logs: their own paths
FLEET_VARIANTS = {
    "product": {},
    "decision in Spark, not here (local_decision_max_rows)": {"local_decision_max_rows": -1},
    "small range in the shuffle's partitions (small_range_records)": {
        "small_range_records": 0,
        "local_decision_max_rows": -1,
    },
    "small writes not in the driver (driver_*_max_rows)": {"driver_rewrite_max_rows": -1, "driver_mark_max_rows": -1},
}


def _round(work: str, built: dict, env: dict, args, order: list[str], results: dict) -> None:
    for name in order:
        store = os.path.join(work, "run")
        copy_log(built["one"], store)
        tuning = VARIANTS[name]
        a = step("clean", store, env, segment_bytes=args.segment_bytes, tuning=tuning)
        gen.append_updates(
            LogStore(store, gc_grace_s=0).log(LOG_NAME),
            gen.topic_config(args.segment_bytes),
            max(1, int(args.records * args.new_share)),
            args.keys,
            args.value_bytes,
            3,
        )
        d = step("clean", store, env, segment_bytes=args.segment_bytes, tuning=tuning)
        results.setdefault(name, []).append(
            {
                "A": a["wall_seconds"],
                "D": d["wall_seconds"],
                "A_route": a.get("route"),
                "D_route": d.get("route"),
                "A_bytes": a["bytes_written"],
                "D_bytes": d["bytes_written"],
                "load": os.getloadavg(),
            }
        )
        print(
            f"  {name}: A {a['wall_seconds']:.2f}s {a.get('route')}, D {d['wall_seconds']:.2f}s "
            f"{d.get('route')}, {d['bytes_written'] / 2**20:.1f} MiB, load {os.getloadavg()[0]:.1f}",
            file=sys.stderr,
        )


def _fleet_round(work: str, built: dict, env: dict, order: list[str], results: dict) -> None:
    for name in order:
        store = os.path.join(work, "fleet")
        copy_log(built["fleet"], store)
        f = step("fleet", store, env, tuning=FLEET_VARIANTS[name])
        results.setdefault(name, []).append({"fleet": f["wall_seconds"]})
        print(f"  fleet, {name}: {f['wall_seconds']:.2f}s", file=sys.stderr)


def _table(results: dict, fleet: dict) -> str:
    """Each variant's median seconds and its ratio to the product's (off / on: what the path wins)."""
    lines = ["| fast path turned off | A s | A off/on | D s | D off/on |", "|---|---|---|---|---|"]
    results = {name: runs for name, runs in results.items() if runs}
    base = {k: statistics.median(r[k] for r in results["product"]) for k in ("A", "D")}
    for name, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("A", "D")}
        lines.append(
            f"| {name} | {med['A']:.2f} | {med['A'] / base['A']:.2f} | {med['D']:.2f} | {med['D'] / base['D']:.2f} |"
        )
    if fleet:
        lines += ["", "| fleet: fast path turned off | fleet s | off/on |", "|---|---|---|"]
        base_f = statistics.median(r["fleet"] for r in fleet["product"])
        for name, runs in fleet.items():
            med = statistics.median(r["fleet"] for r in runs)
            lines.append(f"| {name} | {med:.2f} | {med / base_f:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--keys", type=int, default=500_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--segment-files", type=int, default=20)
    ap.add_argument("--fleet", type=int, default=50)
    ap.add_argument("--fleet-records", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--new-share", type=float, default=0.01, help="D: new records, a share of the log's")
    ap.add_argument("--only", nargs="*", help="variants (by name) to run beside the product's")
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench-out", "paths"))
    ap.add_argument("--json")
    args = ap.parse_args()
    args.segment_bytes = -(-args.records * (16 + gen.KEY_BYTES + args.value_bytes) // args.segment_files)
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    built = build(
        args.workdir, args.records, args.keys, args.value_bytes, args.fleet, args.fleet_records, 10, args.segment_bytes
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    port = _free_port()
    server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": os.path.join(args.workdir, f"connect-{port}")}
    env["SPARK_REMOTE"] = subprocess.run(
        ["bash", "scripts/spark-connect.sh", "start"],
        cwd=REPO,
        env={**env, **server},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    names = [n for n in VARIANTS if n == "product" or not args.only or n in args.only]
    fleet_names = [n for n in FLEET_VARIANTS if n == "product" or not args.only or n in args.only]
    results: dict = {}
    fleet: dict = {}
    try:
        for r in range(args.repeats):
            k = r % len(names)
            _round(args.workdir, built, env, args, names[k:] + names[:k], results)
            if args.fleet and len(fleet_names) > 1:
                k = r % len(fleet_names)
                _fleet_round(args.workdir, built, env, fleet_names[k:] + fleet_names[:k], fleet)
    finally:
        subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
        if results.get("product"):
            print(_table(results, fleet))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "runs": results, "fleet": fleet}, f, indent=1)
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
