"""The benchmark program: `bash bench/run.sh [--quick|--full] [options]` (or `python -m bench.run`).

Generates seeded logs, then measures in one run, on the same files, with one Spark session:
  A  our full cleaning of a log with no clean section
  B  the naive window job (latest record per key, tombstones kept) over the whole log, as Parquet
  C  the copy limit: Spark reads the same segment files and writes them back
  D  incremental cleaning of a cleaned log plus new records worth 1%, 10%, 50% of it
  E  B's deduplication in DuckDB on one node (reference only)
plus the planner and sensor ticks over many logs (bench/sensors.py) and a cleaning of a 10M-record log
with spark.driver.memory=1g in a subprocess (bench/clean_one.py). Writes bench/results/<timestamp>/
{results.md, results.json, plot.png} and copies them to bench/results/latest.{md,json,png}.
See contenders.py for exactly what each contender does.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict

from . import contenders, gen, metrics, report
from .contenders import LOG_NAME, REPO

M, K = 1_000_000, 1_000
DEFAULT_MATRIX = [(M, 100 * K, 100), (M, 100 * K, 1024), (M, M, 100), (M, M, 1024)]
FULL_EXTRA = [(10 * M, 100 * K, 100), (10 * M, 100 * K, 1024), (10 * M, M, 100), (10 * M, M, 1024)]
MODES = {
    # a ~2-minute smoke run of every part, at tiny sizes, no warm-up (its numbers mean nothing)
    "quick": dict(
        matrix=[(20 * K, 2 * K, 100)],
        d_case=(20 * K, 2 * K, 100),
        oneg=(20 * K, 2 * K, 100),
        reps=1,
        sensor_logs=100,
        segment_mib=1,
        warm_up=False,
    ),
    "default": dict(
        matrix=DEFAULT_MATRIX,
        d_case=(M, 100 * K, 100),
        oneg=(10 * M, 100 * K, 100),
        reps=3,
        sensor_logs=1000,
        segment_mib=32,
        warm_up=True,
    ),
    "full": dict(
        matrix=DEFAULT_MATRIX + FULL_EXTRA,
        d_case=(M, 100 * K, 100),
        oneg=(10 * M, 100 * K, 100),
        reps=3,
        sensor_logs=1000,
        segment_mib=32,
        warm_up=True,
    ),
}
FRACTIONS = (0.01, 0.10, 0.50)
SEED = 20240601


def parse_case(text: str) -> tuple[int, int, int]:
    """RECORDSxKEYSxVALUE_BYTES, with k / M suffixes: 1Mx100kx100, 200000x20000x1024."""

    def num(t: str) -> int:
        t = t.strip()
        mult = {"k": K, "K": K, "M": M}.get(t[-1:], 1)
        return int(float(t[:-1] if mult != 1 else t) * mult)

    parts = text.lower().replace("m", "M").split("x")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: expected RECORDSxKEYSxVALUE_BYTES, e.g. 1Mx100kx100")
    return tuple(num(p) for p in parts)  # type: ignore[return-value]


def case_name(records: int, keys: int, value_bytes: int) -> str:
    def n(x: int) -> str:
        return f"{x // M}M" if x % M == 0 else f"{x // K}k" if x % K == 0 else str(x)

    v = f"{value_bytes // 1024} KiB" if value_bytes % 1024 == 0 else f"{value_bytes} B"
    return f"{n(records)} x {n(keys)} keys x {v}"


def case_dir(records: int, keys: int, value_bytes: int) -> str:
    return f"r{records}-k{keys}-v{value_bytes}"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Bench:
    def __init__(self, args, mode: dict):
        self.args = args
        self.mode = mode
        self.work = os.path.abspath(args.workdir)
        self.seg_bytes = int(mode["segment_mib"] * 1024 * 1024)
        self.cfg = gen.topic_config(self.seg_bytes)
        self.runs: list[contenders.Run] = []
        self.failures: list[dict] = []  # contender runs that raised
        self.logs: dict[str, dict] = {}  # case -> log description (+ generation time)
        self.d_logs: list[dict] = []  # the incremental logs
        self.pristine: dict[tuple, str] = {}
        self.sampler = metrics.ProcSampler().start()
        self.spark = None
        self.spark_info: dict = {}

    # --- logs --------------------------------------------------------------------------------
    def pristine_log(self, case: tuple) -> str:
        if case in self.pristine:
            return self.pristine[case]
        from compaction_assets.planning.planner import evaluate
        from compaction_assets.store.log_store import LogStore

        root = os.path.join(self.work, "pristine", case_dir(*case))
        shutil.rmtree(root, ignore_errors=True)
        say(f"generating {case_name(*case)} (seed {SEED})")
        t = time.perf_counter()
        handle = LogStore(root, gc_grace_s=0).log(LOG_NAME)
        gen.generate(handle, self.cfg, *case, seed=SEED)
        info = contenders.log_info(root)
        info["generate_seconds"] = time.perf_counter() - t
        m = handle.manifest()
        t = time.perf_counter()
        for _ in range(100):
            evaluate(m, self.cfg, gen.NOW)
        info["planner_ms"] = (time.perf_counter() - t) * 10
        info["dirty_ratio"] = evaluate(m, self.cfg, gen.NOW).dirty_ratio
        self.logs[case_name(*case)] = {"case": list(case), **info}
        say(
            f"  {info['records']} records, {info['disk_bytes'] / 2**20:.1f} MiB in {info['files']} files, "
            f"{info['segments']} segments, in {info['generate_seconds']:.1f}s"
        )
        self.pristine[case] = root
        return root

    def drop_pristine(self, case: tuple) -> None:
        keep = {tuple(self.mode["d_case"])} | ({tuple(self.mode["oneg"])} if not self.args.skip_oneg else set())
        if case in self.pristine and case not in keep and not self.args.keep:
            shutil.rmtree(self.pristine.pop(case), ignore_errors=True)

    # --- Spark -------------------------------------------------------------------------------
    def start_spark(self) -> None:
        self.event_dir = os.path.join(self.work, "events")
        os.makedirs(self.event_dir, exist_ok=True)
        conf = contenders.bench_spark_conf(
            self.event_dir, os.path.join(self.work, "spark-local"), self.args.driver_memory
        )
        t = time.perf_counter()
        self.spark, self.spark_info = contenders.start_spark(conf)
        self.spark_info["start_seconds"] = time.perf_counter() - t
        say(
            f"Spark {self.spark.version} up in {self.spark_info['start_seconds']:.1f}s "
            f"({self.spark_info['master']}, driver heap {self.spark_info['driver_max_heap'] / 2**20:.0f} MiB)"
        )

    def warm_up(self) -> None:
        """One untimed pass of every contender on a tiny log: JIT, class loading, Python workers."""
        from compaction_assets.store.log_store import LogStore

        root = os.path.join(self.work, "warmup")
        gen.generate(LogStore(root, gc_grace_s=0).log(LOG_NAME), self.cfg, 5_000, 500, 100, seed=SEED)
        t = time.perf_counter()
        for kind in self.contender_list("ABCE"):
            contenders.run_contender(
                kind, self.spark, self.cfg, root, os.path.join(self.work, "run"), "warm-up", 0, self.sampler
            )
        shutil.rmtree(root, ignore_errors=True)
        say(f"warm-up done in {time.perf_counter() - t:.1f}s")

    def contender_list(self, kinds: str) -> list[str]:
        return [k for k in kinds if not (k == "E" and self.args.skip_duckdb)]

    def measure(self, case: str, pristine: str, kinds: list[str], group: str, **extra) -> list[contenders.Run]:
        out = []
        for rep in range(self.mode["reps"]):
            for kind in kinds:  # interleaved: A, B, C, ..., A, B, C, ...
                try:
                    r = contenders.run_contender(
                        kind,
                        self.spark,
                        self.cfg,
                        pristine,
                        os.path.join(self.work, "run"),
                        case,
                        rep,
                        self.sampler,
                        self.args.duckdb_threads,
                    )
                except Exception as exc:  # a failed contender is a result too; the others go on
                    self.sampler.end()
                    shutil.rmtree(os.path.join(self.work, "run"), ignore_errors=True)
                    err = f"{type(exc).__name__}: {str(exc).strip()[:1500]}"
                    say(f"  {case} {kind} run {rep + 1}/{self.mode['reps']}: FAILED {err[:300]}")
                    self.failures.append({"case": case, "contender": kind, "rep": rep, "error": err})
                    continue
                r.extra.update(group=group, **extra)
                out.append(r)
                say(
                    f"  {case} {kind} run {rep + 1}/{self.mode['reps']}: {r.seconds:.2f}s, "
                    f"{r.output_records} records out, {r.disk_written_data / 2**20:.1f} MiB written"
                )
        med = {
            k: statistics.median([r.seconds for r in out if r.contender == k])
            for k in kinds
            if any(r.contender == k for r in out)
        }
        if "C" in med:
            say("  medians: " + ", ".join(f"{k} {v:.2f}s ({v / med['C']:.2f} x C)" for k, v in med.items()))
        self.runs.extend(out)
        return out

    # --- parts -------------------------------------------------------------------------------
    def matrix(self) -> None:
        for case in self.mode["matrix"]:
            pristine = self.pristine_log(case)
            self.measure(case_name(*case), pristine, self.contender_list("ABCE"), "matrix")
            self.drop_pristine(case)

    def incremental(self) -> None:
        from compaction_assets.cleaning import engine
        from compaction_assets.planning.planner import evaluate
        from compaction_assets.store.log_store import LogStore

        case = tuple(self.mode["d_case"])
        _records, keys, value_bytes = case
        base = os.path.join(self.work, "d-base")
        contenders.copy_log(self.pristine_log(case), base)
        handle = LogStore(base, gc_grace_s=0).log(LOG_NAME)
        t = time.perf_counter()
        engine.run(handle, self.cfg, gen.NOW, spark=self.spark, force=True, gc=False)
        cleaned = handle.manifest().total_records
        say(f"D: base {case_name(*case)} cleaned once ({cleaned} records) in {time.perf_counter() - t:.1f}s")
        self.drop_pristine(case)
        for frac in FRACTIONS:
            name = f"D {frac:.0%}: {case_name(*case)} cleaned + {frac:.0%}"
            root = os.path.join(self.work, f"d-{int(frac * 100)}")
            contenders.copy_log(base, root)
            h = LogStore(root, gc_grace_s=0).log(LOG_NAME)
            new = max(1, round(frac * cleaned))
            gen.append_updates(h, self.cfg, new, keys, value_bytes, seed=SEED + int(frac * 1000))
            info = contenders.log_info(root)
            ev = evaluate(h.manifest(), self.cfg, gen.NOW)
            d = {
                "name": name,
                "fraction": frac,
                "base_case": case_name(*case),
                "base_records": cleaned,
                "new_records": new,
                "dirty_ratio": ev.dirty_ratio,
                **info,
            }
            self.d_logs.append(d)
            say(f"{name}: {new} new records, {info['records']} records, dirty ratio {ev.dirty_ratio:.4f}")
            self.measure(name, root, ["A", "B", "C", "D"], "incremental", fraction=frac, dirty_ratio=ev.dirty_ratio)
            if not self.args.keep:
                shutil.rmtree(root, ignore_errors=True)
        if not self.args.keep:
            shutil.rmtree(base, ignore_errors=True)

    def stop_spark(self) -> None:
        app_id = self.spark_info["app_id"]
        self.spark.stop()
        self.spark = None
        files = metrics.event_log_files(self.event_dir, app_id)
        events = metrics.read_events(files)
        for r in self.runs:
            if r.contender != "E":
                r.spark = metrics.figures_between(events, r.t0_ms, r.t1_ms).as_dict()
        say(f"read Spark's event log ({sum(os.path.getsize(f) for f in files) / 2**20:.1f} MiB)")

    def one_gig(self) -> dict:
        """The largest log cleaned by a driver with 1g, in its own process (peak RSS of its tree)."""
        case = tuple(self.mode["oneg"])
        pristine = self.pristine_log(case)
        work = os.path.join(self.work, "oneg")
        store = os.path.join(work, "store")
        contenders.copy_log(pristine, store)
        out_json = os.path.join(work, "result.json")
        env = {**os.environ, "SPARK_DRIVER_MEMORY": "1g"}
        say(f"1g driver: cleaning {case_name(*case)} in a subprocess with SPARK_DRIVER_MEMORY=1g")
        t = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.clean_one",
                "--store",
                store,
                "--work",
                work,
                "--json",
                out_json,
                "--segment-bytes",
                str(self.seg_bytes),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        sampler = metrics.ProcSampler(proc.pid, interval=0.2).start()
        sampler.begin()
        timed_out = False
        try:
            output, _ = proc.communicate(timeout=self.args.oneg_timeout)
        except subprocess.TimeoutExpired:  # stop the child's own process group (its JVM and workers)
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        mem = sampler.end()
        sampler.stop()
        res: dict = {
            "case": case_name(*case),
            "records": case[0],
            "exit_code": proc.returncode,
            "wall_seconds_with_startup": time.perf_counter() - t,
            "mem": mem,
        }
        if timed_out:
            res.update(success=False, error=f"timed out after {self.args.oneg_timeout:.0f}s (killed)")
            out_json = os.path.join(work, "no-result")
        try:
            res.update(json.load(open(out_json)))
        except (OSError, ValueError):
            res["success"] = False
            res.setdefault("error", "no result file; output: " + output[-2000:])
        say(
            f"  success={res.get('success')} in {res.get('seconds', float('nan')):.1f}s, peak RSS of its "
            f"process tree {mem.get('rss_total', 0) / 2**20:.0f} MiB (JVM {mem.get('rss_jvm', 0) / 2**20:.0f} MiB)"
        )
        if not res.get("success"):
            say("  " + (res.get("error") or output[-1000:]))
        if not self.args.keep:
            shutil.rmtree(work, ignore_errors=True)
        self.drop_pristine(case)
        return res

    def sensors(self) -> dict:
        out_json = os.path.join(self.work, "sensors.json")
        say(f"planner and sensor ticks over {self.mode['sensor_logs']} logs (subprocess)")
        proc = subprocess.run(
            [sys.executable, "-m", "bench.sensors", "--logs", str(self.mode["sensor_logs"]), "--json", out_json],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            say("  sensor benchmark failed: " + proc.stderr.strip()[-1500:])
            return {"error": proc.stderr.strip()[-1500:]}
        for line in proc.stdout.strip().splitlines():
            say("  " + line)
        return json.load(open(out_json))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="bash bench/run.sh", description=__doc__.splitlines()[0])
    size = ap.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: a ~2-minute smoke run")
    size.add_argument("--full", action="store_true", help="the default matrix plus its 10M-record rows")
    ap.add_argument("--reps", type=int, help="repetitions per contender (default 3; 1 with --quick)")
    ap.add_argument(
        "--matrix",
        type=lambda t: [parse_case(c) for c in t.split(",")],
        help="cases of A/B/C/E instead of the mode's: comma-separated RECORDSxKEYSxVALUE_BYTES "
        "(k, M suffixes), e.g. 1Mx100kx100,1Mx1Mx1024",
    )
    ap.add_argument("--d-case", type=parse_case, help="the log D starts from (default 1Mx100kx100)")
    ap.add_argument("--oneg-case", type=parse_case, help="the log cleaned with a 1g driver (default 10Mx100kx100)")
    ap.add_argument("--segment-mib", type=float, help="segment.bytes in MiB (default 32; 1 with --quick)")
    ap.add_argument(
        "--driver-memory",
        default=os.environ.get("SPARK_DRIVER_MEMORY", "2g"),
        help="spark.driver.memory of the benchmark's session (default: $SPARK_DRIVER_MEMORY or 2g)",
    )
    ap.add_argument("--duckdb-threads", type=int, default=2, help="DuckDB threads for E (default 2)")
    ap.add_argument("--workdir", help="where logs are generated and copied (default bench-out/work-<timestamp>)")
    ap.add_argument(
        "--results",
        default=os.path.join(REPO, "bench", "results"),
        help="results folder (a <timestamp> folder in it, plus latest.*)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the generated logs and copies")
    ap.add_argument("--skip-duckdb", action="store_true", help="skip E")
    ap.add_argument("--skip-incremental", action="store_true", help="skip D")
    ap.add_argument("--skip-oneg", action="store_true", help="skip the 1g-driver cleaning")
    ap.add_argument("--skip-sensors", action="store_true", help="skip the planner and sensor ticks")
    ap.add_argument("--oneg-timeout", type=float, default=3600, help="seconds before the 1g-driver run is killed")
    args = ap.parse_args(argv)
    mode_name = "quick" if args.quick else "full" if args.full else "default"
    mode = dict(MODES[mode_name])
    for opt, key in (
        ("reps", "reps"),
        ("matrix", "matrix"),
        ("d_case", "d_case"),
        ("oneg_case", "oneg"),
        ("segment_mib", "segment_mib"),
    ):
        if getattr(args, opt):
            mode[key] = getattr(args, opt)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.workdir = args.workdir or os.path.join(REPO, "bench-out", f"work-{stamp}")
    os.makedirs(args.workdir, exist_ok=True)
    # Spark's Python workers and the subprocesses import this checkout, not an installed copy.
    os.environ["PYTHONPATH"] = REPO + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")

    started = time.time()
    say(
        f"benchmark, mode {mode_name}: matrix {[case_name(*c) for c in mode['matrix']]}, "
        f"{mode['reps']} repetition(s), work folder {args.workdir}"
    )
    machine = report.machine(load_at="start")
    b = Bench(args, mode)
    sensors = None if args.skip_sensors else b.sensors()
    try:
        b.start_spark()
        if mode["warm_up"]:
            b.warm_up()
        b.matrix()
        if not args.skip_incremental:
            b.incremental()
    finally:
        if b.spark is not None:
            b.stop_spark()
    oneg = None if args.skip_oneg else b.one_gig()
    b.sampler.stop()
    machine["load_average_end"] = list(os.getloadavg())
    result = {
        "mode": mode_name,
        "command": "bash bench/run.sh " + " ".join(sys.argv[1:] if argv is None else argv),
        "started": dt.datetime.fromtimestamp(started).isoformat(timespec="seconds"),
        "total_seconds": time.time() - started,
        "seed": SEED,
        "reps": mode["reps"],
        "segment_bytes": b.seg_bytes,
        "warm_up": mode["warm_up"],
        "topic_config": b.cfg.to_kafka(),
        "now": gen.NOW,
        "machine": machine,
        "spark": b.spark_info,
        "logs": b.logs,
        "incremental_logs": b.d_logs,
        "runs": [asdict(r) for r in b.runs],
        "failures": b.failures,
        "oneg": oneg,
        "sensors": sensors,
    }
    result["summary"] = report.summarize(result)
    result["targets"] = report.targets(result)
    out_dir = os.path.join(args.results, stamp)
    report.write_all(result, out_dir, args.results)
    if not args.keep:
        shutil.rmtree(args.workdir, ignore_errors=True)
    print()
    print(report.targets_text(result["targets"]))
    say(f"done in {(time.time() - started) / 60:.1f} min; results in {out_dir} and {args.results}/latest.md")


if __name__ == "__main__":
    main()
