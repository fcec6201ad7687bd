"""What each fast path of the cleaning wins: the same steps with the path on and off, interleaved.

    PYTHONPATH=. .venv/bin/python -m bench.paths [--records 5000000] [--keys 500000] [--segment-files 20]
                                                 [--fleet 50] [--fleet-records 20000] [--repeats 2]
                                                 [--only NAME ...] [--json FILE]

Warm (one Spark Connect server, as bench/modes.py's warm mode), every step its own process timed from
outside (bench/step.py with `--tuning`): A (a forced cleaning of the fresh log) and D (1% new records,
then a forced cleaning; `--new-share`) of one log, the latest state of that log before D (its 1% new
records a tail above the cleaned prefix), and the fleet of small logs (`run_many`), for the product's
tuning and for each variant that turns one fast path off (its general twin).

Each variant is compared with the variant it names as `against`: the product's, or, for a path that
only a Spark route takes, the same route with that path on (under the benchmark's local master the
product decides and writes in its own process, where the Spark routes' paths are never taken). Its
ratio (off / on: above 1, the path wins) is taken within each round, then the median over rounds.
Variants run in a rotated order, reversed every other round, so a machine whose load drifts weighs on
all of them alike and each variant runs both before and after the one it is compared with.

Time is CPU seconds (user and system) of the step's process and of the Spark Connect server's process
tree (its JVM and Python workers; this process adopts them, `become_subreaper`) while the step ran, so
that work moved to the server is counted and other processes on a shared machine are not; wall seconds
are recorded too. A variant whose path only D takes (`steps` "D") starts from the log after the
product's A and the new records, made once (twins leave the same log). Offset strategy, as the
benchmark's logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field

from compaction_assets.store.log_store import LogStore

from . import gen
from .modes import LOG_NAME, REPO, _free_port, build, copy_log, step

# a range grouped by Spark (no decision made here), the route where Spark's own paths are taken
IN_SPARK = {"local_decision_max_rows": -1}
# ... and D's range grouped by Spark with its prefix, not probed
D_IN_SPARK = {"local_decision_max_rows": -1, "probe_max_newer_rows": -1}
# writes in Python workers, as under a cluster's master
IN_WORKERS = {"local_master_writes_here": False}


@dataclass(frozen=True)
class Variant:
    """CleanerTuning fields that turn one fast path off (`tuning`), the variant it is compared with,
    the steps it runs: "A" and "D" (a log cleaned, then 1% new and cleaned again), "D" (the second
    only), "fleet" or "state" (bench/step.py's `--state`)."""

    tuning: dict = field(default_factory=dict)
    against: str | None = "product"  # None: a baseline, compared with nothing
    steps: tuple[str, ...] = ("A", "D")
    state: str = "product"


VARIANTS = {
    "product": Variant(against=None),
    # the decision: here, its winners collected, in the group-by's tasks, cached
    "decision in Spark, not here (local_decision_max_rows)": Variant(IN_SPARK),
    "decision in tasks, not collected (collect_offset_decision_max_rows)": Variant(
        {**IN_SPARK, "collect_offset_decision_max_rows": -1},
        against="decision in Spark, not here (local_decision_max_rows)",
        steps=("A",),
    ),
    "decision cached, not in tasks (task_decision_max_rows)": Variant(
        {**IN_SPARK, "collect_offset_decision_max_rows": -1, "task_decision_max_rows": -1},
        against="decision in tasks, not collected (collect_offset_decision_max_rows)",
        steps=("A",),
    ),
    "partial aggregation kept (distinct_skips_partial)": Variant(
        {**IN_SPARK, "distinct_skips_partial": 1.01},
        against="decision in Spark, not here (local_decision_max_rows)",
        steps=("A",),
    ),
    # D: the prefix probed, or the range grouped by Spark
    "no probe of the prefix (probe_max_newer_rows)": Variant({"probe_max_newer_rows": -1}, steps=("D",)),
    "D grouped in Spark (probe_max_newer_rows, local_decision_max_rows)": Variant(D_IN_SPARK, steps=("D",)),
    "every key grouped, not the touched ones (incremental_min_rows)": Variant(
        {**D_IN_SPARK, "incremental_min_rows": 1 << 62},
        against="D grouped in Spark (probe_max_newer_rows, local_decision_max_rows)",
        steps=("D",),
    ),
    "vector by a merge join, not broadcast (reads.broadcast_dead_max)": Variant(
        {**D_IN_SPARK, "reads": {"broadcast_dead_max": -1}},
        against="D grouped in Spark (probe_max_newer_rows, local_decision_max_rows)",
        steps=("D",),
    ),
    "stamps in one map (reads.stamp_bucket_files)": Variant(
        {**D_IN_SPARK, "reads": {"stamp_bucket_files": 1 << 30}},
        against="D grouped in Spark (probe_max_newer_rows, local_decision_max_rows)",
        steps=("D",),
    ),
    # the write
    "writes in Python workers (local_master_writes_here)": Variant(IN_WORKERS),
    "small writes in Python workers too (driver_*_max_rows)": Variant(
        {**IN_WORKERS, "driver_rewrite_max_rows": -1, "driver_mark_max_rows": -1},
        against="writes in Python workers (local_master_writes_here)",
        steps=("D",),
    ),
    "vector rebuilt whole (dead_vector_max_files)": Variant({"dead_vector_max_files": 0}, steps=("D",)),
    "every touched segment rewritten, none marked (rewrite_dead_fraction)": Variant({"rewrite_dead_fraction": 0.0}),
    # the fleet's small logs: their own paths
    "fleet: product": Variant(against=None, steps=("fleet",)),
    "fleet: decision in Spark, not here (local_decision_max_rows)": Variant(IN_SPARK, "fleet: product", ("fleet",)),
    "fleet: small writes in Python workers (driver_*_max_rows)": Variant(
        {**IN_WORKERS, "driver_rewrite_max_rows": -1, "driver_mark_max_rows": -1}, "fleet: product", ("fleet",)
    ),
    # the latest state of the log before D (state/)
    "state: product": Variant(against=None, steps=("state",)),
    "state: built as one table, not file by file (state_parts)": Variant(
        against="state: product", steps=("state",), state="table"
    ),
    "state: by a Spark job, not in this process (fits_in_process)": Variant(
        against="state: product", steps=("state",), state="spark"
    ),
}


def become_subreaper() -> None:
    """Make this process the one that orphans below it are handed to (Linux's PR_SET_CHILD_SUBREAPER):
    the Spark Connect server's JVM, which its start script leaves, and the Python workers a worker daemon
    leaves when it ends, stay in this process's tree (as zombies once they end, their CPU time still
    readable) instead of going to init with their CPU time."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(36, 1, 0, 0, 0) != 0:  # PR_SET_CHILD_SUBREAPER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def tree_cpu_seconds() -> float:
    """CPU seconds of everything this process started (its descendants, with the children each has
    waited for, and the children it has waited for itself), not its own."""
    me = os.getpid()
    parents: dict[int, int] = {}
    times: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        # utime, stime, cutime, cstime; of this process only the last two (the children it waited for)
        times[int(entry)] = sum(int(x) for x in fields[13 if int(entry) == me else 11 : 15])
    tree, grew = {me}, True
    while grew:
        found = {p for p, parent in parents.items() if parent in tree} - tree
        grew = bool(found)
        tree |= found
    return sum(times.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def _timed(*args, **kwargs) -> dict:
    """`step(...)` with the CPU seconds of all it caused: the step's process (`cpu_seconds`), the server's
    tree while it ran (`server_cpu_seconds`), both (`total_cpu_seconds`)."""
    before = tree_cpu_seconds()
    res = step(*args, **kwargs)
    res["total_cpu_seconds"] = tree_cpu_seconds() - before
    res["server_cpu_seconds"] = res["total_cpu_seconds"] - res["cpu_seconds"]
    return res


def _figures(res: dict) -> dict:
    return {k: res[k] for k in ("wall_seconds", "cpu_seconds", "server_cpu_seconds", "total_cpu_seconds")} | {
        "route": res.get("route"),
        "bytes_written": res.get("bytes_written"),
    }


def _append(store: str, args) -> None:
    """D's new records (the same ones each time: their seed is fixed)."""
    gen.append_updates(
        LogStore(store, gc_grace_s=0).log(LOG_NAME),
        gen.topic_config(args.segment_bytes),
        max(1, int(args.records * args.new_share)),
        args.keys,
        args.value_bytes,
        3,
    )


def _run(name: str, number: int, built: dict, env: dict, args) -> dict:
    """One variant's steps in round `number`, their figures by step."""
    variant = VARIANTS[name]
    seg = {"segment_bytes": args.segment_bytes, "tuning": variant.tuning}
    run = os.path.join(args.workdir, "run")
    out: dict = {}
    if "A" in variant.steps:
        copy_log(built["one"], run)
        out["A"] = _figures(_timed("clean", run, env, **seg))
        if "D" in variant.steps:
            _append(run, args)
            out["D"] = _figures(_timed("clean", run, env, **seg))
    elif "D" in variant.steps:
        copy_log(built["before_d"], run)
        out["D"] = _figures(_timed("clean", run, env, **seg))
    if "fleet" in variant.steps:
        copy_log(built["fleet"], run)
        out["fleet"] = _figures(_timed("fleet", run, env, tuning=variant.tuning))
    if "state" in variant.steps:
        state = os.path.join(args.workdir, "state")
        shutil.rmtree(state, ignore_errors=True)
        res = _timed("latest-state", built["before_d"], env, out=state, extra=["--state", variant.state], **seg)
        out["state"] = _figures(res) | {"rows": res.get("rows")}
    load = os.getloadavg()[0]
    shown = ", ".join(f"{k} {v['total_cpu_seconds']:.2f} CPU s ({v['wall_seconds']:.2f} s)" for k, v in out.items())
    print(f"  {name}: {shown}, load {load:.1f}", file=sys.stderr)
    return out | {"load": load, "round": number}


def _valid(run: dict) -> dict:
    """A round's figures without the steps whose server time came out below nothing: a process of the
    server's tree ended and was reaped while the tree was read, so its time was missed."""
    return {k: v for k, v in run.items() if not isinstance(v, dict) or v["server_cpu_seconds"] > -0.05}


def ratios(runs: dict) -> dict:
    """Per variant and step: median CPU and wall seconds, and the median over rounds of its ratio to the
    variant it is compared with in the same round (off / on: above 1, the path wins)."""
    out: dict = {}
    runs = {name: [_valid(r) for r in rounds] for name, rounds in runs.items()}
    for name, rounds in runs.items():
        against = VARIANTS[name].against
        for k in ("A", "D", "fleet", "state"):
            mine = [r[k] for r in rounds if k in r]
            if not mine:
                continue
            # the same round's figures of the variant compared with
            theirs = {b["round"]: b for b in runs.get(against or "", []) if k in b}
            pairs = [(r[k], theirs[r["round"]][k]) for r in rounds if k in r and r["round"] in theirs]
            row = {
                "against": against,
                "cpu": statistics.median(m["total_cpu_seconds"] for m in mine),
                "wall": statistics.median(m["wall_seconds"] for m in mine),
                "rounds": len(mine),
            }
            if pairs:
                row["against_cpu"] = statistics.median(b["total_cpu_seconds"] for _, b in pairs)
                row["cpu_ratio"] = statistics.median(m["total_cpu_seconds"] / b["total_cpu_seconds"] for m, b in pairs)
                row["wall_ratio"] = statistics.median(m["wall_seconds"] / b["wall_seconds"] for m, b in pairs)
            out[f"{name} [{k}]"] = row
    return out


def _table(rows: dict) -> str:
    lines = [
        "| fast path turned off [step] | compared with | CPU s on | CPU s off | CPU off/on | wall off/on |",
        "|---|---|---|---|---|---|",
    ]
    for name, r in rows.items():
        if "cpu_ratio" in r:
            lines.append(
                f"| {name} | {r['against']} | {r['against_cpu']:.2f} | {r['cpu']:.2f} | {r['cpu_ratio']:.2f} | "
                f"{r['wall_ratio']:.2f} |"
            )
        else:
            lines.append(f"| {name} | | {r['cpu']:.2f} | | | |")
    return "\n".join(lines)


def _save(args, runs: dict) -> dict:
    """The ratios of the rounds run so far, written with their figures to `--json` (if given)."""
    rows = ratios(runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs, "ratios": rows}, f, indent=1)
    return rows


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
    ap.add_argument("--only", nargs="*", help="variants (by name) to run, with those they are compared with")
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench-out", "paths"))
    ap.add_argument("--json")
    args = ap.parse_args()
    args.segment_bytes = -(-args.records * (16 + gen.KEY_BYTES + args.value_bytes) // args.segment_files)
    names = [n for n in VARIANTS if not args.only or n in args.only]
    while missing := {VARIANTS[n].against for n in names} - {None, *names}:  # what they are compared with
        names = [n for n in VARIANTS if n in names or n in missing]
    if not args.fleet:
        names = [n for n in names if "fleet" not in VARIANTS[n].steps]
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    built = build(
        args.workdir, args.records, args.keys, args.value_bytes, args.fleet, args.fleet_records, 10, args.segment_bytes
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    become_subreaper()  # before the server starts: its JVM and workers stay in this process's tree
    port = _free_port()
    connect_dir = os.path.join(args.workdir, f"connect-{port}")
    server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": connect_dir}
    env["SPARK_REMOTE"] = subprocess.run(
        ["bash", "scripts/spark-connect.sh", "start"],
        cwd=REPO,
        env={**env, **server},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    runs: dict = {}
    try:
        # the log D starts from: the product's A, then the new records (made once, through the server)
        built["before_d"] = os.path.join(args.workdir, "pristine-before-d")
        copy_log(built["one"], built["before_d"])
        step("clean", built["before_d"], env, segment_bytes=args.segment_bytes)
        _append(built["before_d"], args)
        for r in range(args.repeats):
            # rotated every other round, and reversed every other: each variant runs before and after the
            # one it is compared with (the one after finds the server's plans compiled and its files cached)
            k = r // 2 % len(names)
            order = names[k:] + names[:k]
            print(f"round {r + 1} of {args.repeats}", file=sys.stderr)
            for name in order[::-1] if r % 2 else order:
                runs.setdefault(name, []).append(_run(name, r, built, env, args))
            _save(args, runs)  # each round's, so that a long run stopped early keeps its figures
    finally:
        subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
        if rows := _save(args, runs):
            print(_table(rows))
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
