"""Cold and warm, measured the same way: every step its own process, timed from outside.

    bash bench/modes.sh [--records 200000] [--keys 20000] [--fleet 20] [--fleet-records 2000] [--mode both]
                        [--segment-mib 1 | --segment-files 20]

cold = each step starts its own Spark (a local session, as a cron job or Dagster's run launcher does);
warm = one local Spark Connect server (scripts/spark-connect.sh, on a free port of 127.0.0.1) started
before the timings, every step reaching it through SPARK_REMOTE. Steps (bench/step.py): Spark start
alone, C (copy limit), B (the naive window dedup), A (forced cleaning of the fresh log), D (1% new
records, then a forced cleaning), the latest state of the cleaned log, the dry run (metadata, and
key-level), a fleet of small logs cleaned in one process, E (DuckDB) and one Dagster run. Reports wall
seconds (process included), seconds in process, Spark jobs (cold only: a Connect client cannot see the
server's jobs) and bytes written; figures go to the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time

from compaction_assets.store.log_store import LogStore

from . import gen

LOG_NAME = "bench-0"  # as in bench/contenders.py (which needs the bench extras)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _disk(path: str) -> dict[str, int]:
    out = {}
    for root, _, files in os.walk(path):
        for name in files:
            p = os.path.join(root, name)
            out[p] = os.path.getsize(p)
    return out


def copy_log(src: str, dst: str) -> None:
    """A fresh copy of a pristine store (the step may write into it), flushed to disk so that no write-back
    of the copy runs during the timed step (a 50M-record log is 5.5 GB: written back while A ran, at 50M
    but less at 20M, it inflated A's growth)."""
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    os.sync()


def _written(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(size for p, size in after.items() if p not in before and p.endswith((".parquet", ".json")))


def _children_cpu_seconds() -> float:
    """User and system CPU seconds of this process's children that have ended (each step's process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def step(
    op: str,
    store: str,
    env: dict,
    out: str | None = None,
    concurrency: int | None = None,
    segment_bytes: int = 1 << 20,
    tuning: dict | None = None,
    extra: list[str] | None = None,
) -> dict:
    """Run one step in a fresh process; its JSON line plus the wall time, the CPU seconds of the process
    (and of the children it waited for) and the bytes it wrote (`tuning`: CleanerTuning fields to replace,
    as bench/paths.py turns a fast path off; `extra`: more arguments of bench/step.py)."""
    cmd = [sys.executable, "-m", "bench.step", op, "--store", store, "--segment-bytes", str(segment_bytes)]
    if tuning:
        cmd += ["--tuning", json.dumps(tuning)]
    if concurrency:
        cmd += ["--concurrency", str(concurrency)]
    if out:
        cmd += ["--out", out]
    cmd += extra or []
    before = _disk(store)
    t = time.perf_counter()
    cpu = _children_cpu_seconds()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    cpu = _children_cpu_seconds() - cpu
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"step {op} failed: {proc.stderr.strip()[-1500:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall_seconds"] = wall
    res["cpu_seconds"] = cpu
    res["bytes_written"] = _written(before, _disk(store)) + (
        sum(_disk(out).values()) if out and os.path.isdir(out) else 0
    )
    return res


def build(
    work: str,
    records: int,
    keys: int,
    value_bytes: int,
    fleet: int,
    fleet_records: int,
    dagster_records: int,
    segment_bytes: int = 1 << 20,
) -> dict:
    """The pristine logs (generated once, without Spark): one log (segments of `segment_bytes`), a store
    of `fleet` small logs, and a small log for one Dagster run (segments of 1 MiB)."""
    cfg = gen.topic_config(1 << 20)
    one = os.path.join(work, "pristine")
    gen.generate(
        LogStore(one, gc_grace_s=0).log(LOG_NAME), gen.topic_config(segment_bytes), records, keys, value_bytes, 1
    )
    many = os.path.join(work, "pristine-fleet")
    store = LogStore(many, gc_grace_s=0)
    for i in range(fleet):
        gen.generate(store.log(f"fleet-{i}"), cfg, fleet_records, max(1, fleet_records // 10), value_bytes, 100 + i)
    small = os.path.join(work, "pristine-dagster")
    gen.generate(
        LogStore(small, gc_grace_s=0).log(LOG_NAME), cfg, dagster_records, max(1, dagster_records // 10), value_bytes, 7
    )
    pristine = LogStore(one, gc_grace_s=0).log(LOG_NAME).manifest()
    return {
        "one": one,
        "fleet": many,
        "dagster": small,
        "log_bytes": sum(_disk(one).values()),
        "log_segments": len(pristine.segments),
        "log_files": sum(len(s.files) for s in pristine.segments),
    }


def duckdb_step(store: str, out: str) -> dict | None:
    """E: the same deduplication in DuckDB, its own process (None when the bench extras are missing)."""
    try:
        import duckdb  # noqa: F401  (only whether it is there; bench/duck.py runs it)
    except ImportError:
        return None
    handle = LogStore(store, gc_grace_s=0).log(LOG_NAME)
    spec = os.path.join(os.path.dirname(out), "duck-spec.json")
    with open(spec, "w") as f:
        json.dump(
            {
                "files": [handle.path(ref.name) for ref in handle.manifest().files()],
                "out": out,
                "threads": os.cpu_count() or 2,
            },
            f,
        )
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.duck", spec], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"DuckDB failed: {proc.stderr.strip()[-1500:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "op": "duckdb",
        "seconds": res["seconds"],
        "wall_seconds": wall,
        "rows": res["rows"],
        "bytes_written": os.path.getsize(out),
        "jobs": 0,
    }


def dagster_step(store: str, work: str, env: dict) -> dict:
    """One Dagster run of a small log as a user starts it: `dagster asset materialize` of the four assets
    (and the checks) for one partition, in a fresh process, on a fresh SQLite instance."""
    home = os.path.join(work, "dagster-home")
    shutil.rmtree(home, ignore_errors=True)
    os.makedirs(home)
    with open(os.path.join(home, "dagster.yaml"), "w") as f:
        f.write("telemetry:\n  enabled: false\n")
    run_env = {
        **env,
        "DAGSTER_HOME": home,
        "COMPACTION_STORE": store,
        "COMPACTION_LANDING": os.path.join(work, "dagster-landing"),
        "COMPACTION_LATEST_STATE": os.path.join(work, "dagster-latest"),
    }
    run_env.pop("COMPACTION_TOPICS", None)
    # the partition exists before the timing, as the discovery sensor would have added it
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import dagster as dg, sys; dg.DagsterInstance.get().add_dynamic_partitions('logs', [sys.argv[1]])",
            LOG_NAME,
        ],
        cwd=REPO,
        env=run_env,
        check=True,
        capture_output=True,
    )
    cmd = [
        sys.executable,
        "-m",
        "dagster",
        "asset",
        "materialize",
        "-m",
        "compaction_assets.definitions",
        "--select",
        "raw_segments,cleanable_range,compacted_log,latest_state",
        "--partition",
        LOG_NAME,
    ]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "RUN_SUCCESS" not in out:
        raise RuntimeError(f"the Dagster run failed (exit {proc.returncode}): {out.strip()[-1500:]}")
    # RUN_SUCCESS: the blocking checks passed too (a failing one fails its step and the run)
    return {
        "op": "dagster",
        "seconds": wall,
        "wall_seconds": wall,
        "jobs": None,
        "bytes_written": 0,
        "check_evaluations": sum(1 for line in out.splitlines() if "ASSET_CHECK_EVALUATION" in line),
    }


def run_mode(mode: str, work: str, built: dict, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE",)}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    server = None
    if mode == "warm":
        port = _free_port()
        server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": os.path.join(work, f"connect-{port}")}
        t = time.perf_counter()
        remote = subprocess.run(
            ["bash", "scripts/spark-connect.sh", "start"],
            cwd=REPO,
            env={**env, **server},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        env["SPARK_REMOTE"] = remote
        print(f"  warm: Spark Connect server at {remote} in {time.perf_counter() - t:.1f}s", file=sys.stderr)
    res: dict = {}
    try:

        def fresh(name: str, src: str) -> str:
            dst = os.path.join(work, f"{mode}-{name}")
            copy_log(src, dst)
            return dst

        def note(name: str, r: dict) -> None:
            res[name] = r
            print(
                f"  {mode} {name}: wall {r['wall_seconds']:.2f}s (in process {r['seconds']:.2f}s, "
                f"Spark start {r.get('spark_start_seconds', 0):.2f}s), jobs {r.get('jobs')}, "
                f"{r['bytes_written'] / 2**20:.1f} MiB written",
                file=sys.stderr,
            )

        note("session", step("session", fresh("s", built["one"]), env))
        st = fresh("c", built["one"])
        note("C", step("copy", st, env, out=os.path.join(work, f"{mode}-copy-out")))
        note("B", step("window", fresh("b", built["one"]), env, out=os.path.join(work, f"{mode}-window-out")))
        st = fresh("a", built["one"])
        seg = {"segment_bytes": args.segment_bytes}
        note("A", step("clean", st, env, **seg))
        gen.append_updates(
            LogStore(st, gc_grace_s=0).log(LOG_NAME),
            gen.topic_config(args.segment_bytes),
            max(1, args.records // 100),
            args.keys,
            args.value_bytes,
            3,
        )
        note("D", step("clean", st, env, **seg))
        note("latest_state", step("latest-state", st, env, out=os.path.join(work, f"{mode}-latest"), **seg))
        note("plan", step("plan", st, env, **seg))
        note("plan_detail", step("plan-detail", st, env, **seg))
        fl = fresh("fleet", built["fleet"])
        note("fleet", step("fleet", fl, env, concurrency=args.concurrency))
        res["fleet"]["per_log_seconds"] = res["fleet"]["wall_seconds"] / max(1, args.fleet)
        duck = duckdb_step(fresh("e", built["one"]), os.path.join(work, f"{mode}-duck.parquet"))
        if duck is not None:
            note("E", duck)
        note("dagster", dagster_step(fresh("dagster", built["dagster"]), os.path.join(work, f"{mode}-dg"), env))
    finally:
        if server:
            subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
    return res


STEPS = (
    ("session", "Spark session and one trivial job"),
    ("C", "C: Spark reads and writes the segment files (the copy limit)"),
    ("B", "B: the naive `row_number()` window dedup, written (no Kafka semantics)"),
    ("A", "A: forced cleaning of the fresh log"),
    ("D", "D: 1% new records, then a forced cleaning"),
    ("latest_state", "latest state of the cleaned log"),
    ("plan", "dry run from metadata (`cleanable_range`'s default)"),
    ("plan_detail", "key-level dry run"),
    ("fleet", "fleet: `run_many` over the small logs"),
    ("E", "E: DuckDB, the same deduplication (its own process)"),
    ("dagster", "one Dagster run of a small log (`dagster asset materialize`)"),
)
TARGETS = {
    "A_over_C": ("A / C", "cold <= 1.2"),
    "A_over_B": ("A / B", "(none: for comparison)"),
    "A_over_E": ("A / E", "warm <= 4"),
    "latest_state_over_A": ("latest state / A", "cold <= 0.4"),
    "D_over_A": ("D / A, time", "warm <= 0.2"),
    "D_bytes_over_A_bytes": ("D bytes / A bytes", "<= 0.1"),
    "fleet_seconds_per_log": ("fleet, s per log", "cold <= 0.5, warm <= 0.3"),
    "dagster_run_seconds": ("one Dagster run, s", "cold <= 15, warm <= 6"),
}


def render(result: dict) -> str:
    """The README's tables (steps, then ratios) for one run's JSON."""
    cold, warm = result.get("cold", {}), result.get("warm", {})

    def cell(r: dict, name: str, key: str, fmt: str = "{:.2f}") -> str:
        v = r.get(name, {}).get(key)
        return "" if v is None else fmt.format(v)

    lines = [
        "| step | cold wall s | cold Spark start s | cold Spark jobs | warm wall s | MiB written |",
        "|---|---|---|---|---|---|",
    ]
    for name, label in STEPS:
        if name not in cold and name not in warm:
            continue
        written = (cold.get(name) or warm.get(name))["bytes_written"] / 2**20
        lines.append(
            f"| {label} | {cell(cold, name, 'wall_seconds')} | {cell(cold, name, 'spark_start_seconds')} | "
            f"{cell(cold, name, 'jobs', '{}')} | {cell(warm, name, 'wall_seconds')} | {written:.1f} |"
        )
    lines += ["", "| ratio | cold | warm | the issue's target |", "|---|---|---|---|"]
    for key, (label, target) in TARGETS.items():
        c, w = cold.get("ratios", {}).get(key), warm.get("ratios", {}).get(key)
        fmt = "{:.3f}" if key == "D_bytes_over_A_bytes" else "{:.2f}"
        lines.append(
            f"| {label} | {'' if c is None else fmt.format(c)} | {'' if w is None else fmt.format(w)} | {target} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--keys", type=int, default=20_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--fleet", type=int, default=20)
    ap.add_argument("--fleet-records", type=int, default=2_000)
    ap.add_argument("--concurrency", type=int, default=None, help="fleet: cleanings at once (default: the product's)")
    ap.add_argument("--dagster-records", type=int, default=20_000)
    ap.add_argument("--mode", choices=("cold", "warm", "both"), default="both")
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--segment-mib", type=float, default=1.0, help="segment.bytes of the measured log, in MiB")
    size.add_argument(
        "--segment-files",
        type=int,
        help="instead: segments of the size that cuts the log into "
        "about this many (the issue's 20 Parquet files: --segment-files 20)",
    )
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench-out", "modes"))
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "results", "modes-latest.json"))
    ap.add_argument("--render", metavar="JSON", help="print the README tables of an earlier run's JSON and stop")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)))
        return
    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    t = time.perf_counter()
    if args.segment_files:  # SPEC §4 logical sizes: 16 bytes, the key and the value a record
        args.segment_bytes = -(-args.records * (16 + gen.KEY_BYTES + args.value_bytes) // args.segment_files)
    else:
        args.segment_bytes = int(args.segment_mib * 2**20)
    built = build(
        args.workdir,
        args.records,
        args.keys,
        args.value_bytes,
        args.fleet,
        args.fleet_records,
        args.dagster_records,
        args.segment_bytes,
    )
    print(
        f"generated in {time.perf_counter() - t:.1f}s: {args.records} records over {args.keys} keys "
        f"({built['log_bytes'] / 2**20:.1f} MiB in {built['log_segments']} segments, {built['log_files']} files "
        f"of segment.bytes {args.segment_bytes}), fleet of {args.fleet} x {args.fleet_records}",
        file=sys.stderr,
    )
    result = {
        "params": vars(args),
        "log_bytes": built["log_bytes"],
        "log_segments": built["log_segments"],
        "log_files": built["log_files"],
        "load_start": os.getloadavg(),
    }
    for mode in ("cold", "warm") if args.mode == "both" else (args.mode,):
        result[mode] = run_mode(mode, args.workdir, built, args)
    result["load_end"] = os.getloadavg()
    for mode in ("cold", "warm"):
        r = result.get(mode)
        if r:
            a, d = r["A"], r["D"]
            r["ratios"] = {
                "A_over_C": a["wall_seconds"] / r["C"]["wall_seconds"],
                "latest_state_over_A": r["latest_state"]["wall_seconds"] / a["wall_seconds"],
                "D_over_A": d["wall_seconds"] / a["wall_seconds"],
                "D_bytes_over_A_bytes": d["bytes_written"] / max(1, a["bytes_written"]),
                "fleet_seconds_per_log": r["fleet"]["per_log_seconds"],
                "dagster_run_seconds": r["dagster"]["wall_seconds"],
            }
            if "E" in r:
                r["ratios"]["A_over_E"] = a["wall_seconds"] / r["E"]["wall_seconds"]
            if "B" in r:
                r["ratios"]["A_over_B"] = a["wall_seconds"] / r["B"]["wall_seconds"]
            print(f"{mode}: " + ", ".join(f"{k} {v:.3f}" for k, v in r["ratios"].items()), file=sys.stderr)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2, default=str)
    shutil.rmtree(args.workdir, ignore_errors=True)
    print(render(result))


if __name__ == "__main__":
    main()
