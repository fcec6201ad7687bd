"""Performance as partitions grow: bench/modes.py's log steps at several sizes, each step's growth reported.

    PYTHONPATH=. .venv/bin/python -m bench.sweep [--cases 5000000 20000000 50000000 50000000/50000000]
                                                 [--mode both] [--steps C A D latest_state] [--json FILE]
                                                 [--keep --workdir DIR] [--repeat N]

A case is RECORDS[/KEYS[/FILES]]: KEYS defaults to RECORDS / 10 (10 records a key), FILES (segment
files of the fresh log) to one per 500,000 records and at least 20 (5M: 20 files, 20M: 40, as issue 32's
table). Every case's log is generated first (bench/gen.py), then measured cold and warm exactly as
bench/modes.py measures them (every step its own process, timed from outside; warm: one Spark Connect
server for every case of the mode). The work folders are removed at the end (50M records of 100 bytes is
about 6 GB a copy, and the largest case needs one copy more while it runs), unless --keep: then each
case's log stays under --workdir and a later run reuses it. Each step's peak resident memory is
recorded: the step's process (the driver's Python side), its local JVM (cold) or the Connect server
(warm). Steps: C (Spark copies the files), A (forced cleaning of the fresh log), D (1% new records, then a
forced cleaning), the latest state; E (DuckDB) with `--steps ... E`. `--repeat N` runs N rounds of a mode,
each through every case in turn, and reports each step's median run (every run's wall time kept beside
it); a step's growth is then also taken round by round (this machine drifts 1.2-1.7x between sweeps
minutes apart, so two cases measured one after the other compare better than their medians). Each
step's growth is its time over the previous case's, beside the data's growth (records); the cleaning's
route (decision collected, probed or cached; only the touched keys grouped; write threads) is printed
with A and D.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from compaction_assets.store.log_store import LogStore

from . import gen
from .modes import LOG_NAME, REPO, _disk, _free_port, build, copy_log, duckdb_step, step

RECORDS_PER_FILE = 500_000
STEP_LABELS = {
    "C": "C: Spark copy of the files",
    "A": "A: forced cleaning",
    "D": "D: 1% new, then a cleaning",
    "latest_state": "latest state",
    "E": "E: DuckDB dedup",
}


@dataclass(frozen=True)
class Case:
    """One size of the sweep: records, keys and the fresh log's segment files."""

    records: int
    keys: int
    files: int

    @property
    def name(self) -> str:
        return f"{self.records:,} / {self.keys:,} keys, {self.files} files"


def parse_case(text: str) -> Case:
    """RECORDS[/KEYS[/FILES]] as a Case (keys: a tenth of the records; files: one per 500k records, >= 20)."""
    parts = [int(p) for p in text.split("/")]
    records = parts[0]
    keys = parts[1] if len(parts) > 1 else max(1, records // 10)
    files = parts[2] if len(parts) > 2 else max(20, records // RECORDS_PER_FILE)
    return Case(records, keys, files)


@dataclass
class Sized:
    """A case with its work folder, its pristine log and its segment size."""

    case: Case
    work: str
    built: dict
    segment_bytes: int


def measure_mode(mode: str, sized: list[Sized], steps: list[str], value_bytes: int, repeat: int = 1) -> list[dict]:
    """Every case's steps in one mode (warm: one Connect server started for them all), as bench/modes.py
    runs them, in `repeat` rounds that each go through every case (so that a growth is taken between runs
    minutes apart, not between one case's runs and the next case's): each step's median run is its
    figure, every run's wall time beside it; a result per case."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    server = None
    if mode == "warm":
        port = _free_port()
        server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": os.path.join(sized[0].work, f"connect-{port}")}
        env["SPARK_REMOTE"] = subprocess.run(
            ["bash", "scripts/spark-connect.sh", "start"],
            cwd=REPO,
            env={**env, **server},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    runs: list[dict[str, list[dict]]] = [{} for _ in sized]
    try:
        for _ in range(repeat):
            for at, one in enumerate(sized):
                run_steps(one, mode, env, _noter(one.case, mode, runs[at], server), steps, value_bytes)
    finally:
        if server:
            peak = server_peak_rss_mib(server["SPARK_CONNECT_DIR"])
            subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
    results = []
    for case_runs in runs:
        res: dict = {name: median_run(rs) for name, rs in case_runs.items()}
        if server:
            res["server_max_rss_mib"] = peak
        res["ratios"] = ratios(res)
        results.append(res)
    return results


def _noter(case: Case, mode: str, runs: dict[str, list[dict]], server: dict | None) -> Callable[[str, dict], None]:
    """The function that records (and prints) one run of a step of `case`."""

    def note(name: str, r: dict) -> None:
        r["load"] = os.getloadavg()
        runs.setdefault(name, []).append(r)
        route = f", route {r['route']}" if r.get("route") else ""
        if r.get("stats"):  # why a cleaning wrote what it wrote
            route += ", " + ", ".join(
                f"{k} {r['stats'][k]}"
                for k in ("segments_rewritten", "segments_marked", "records_rewritten", "deletion_vector_records")
            )
        if server:  # the server's peak so far: it only grows, so the step that raised it shows
            r["server_max_rss_mib"] = server_peak_rss_mib(server["SPARK_CONNECT_DIR"])
        jvm_rss = r.get("jvm_max_rss_mib") or r.get("server_max_rss_mib") or 0
        rss = f", peak RSS driver {r.get('max_rss_mib') or 0:.0f} MiB, JVM {jvm_rss:.0f} MiB"
        print(
            f"  {case.records:,} {mode} {name}: wall {r['wall_seconds']:.2f}s (in process {r['seconds']:.2f}s), "
            f"{r['bytes_written'] / 2**20:.1f} MiB written, load {r['load'][0]:.1f}{route}{rss}",
            file=sys.stderr,
        )

    return note


def median_run(runs: list[dict]) -> dict:
    """The run of median wall time (the upper one of an even count), with every run's wall time."""
    ordered = sorted(runs, key=lambda r: r["wall_seconds"])
    return {**ordered[len(ordered) // 2], "wall_runs": [r["wall_seconds"] for r in runs]}


def run_steps(
    one: Sized, mode: str, env: dict, note: Callable[[str, dict], None], steps: list[str], value_bytes: int
) -> None:
    """One round of the case's steps: C, E, then A, D and the latest state on one fresh copy."""
    work = one.work

    def fresh(name: str) -> str:
        dst = os.path.join(work, f"{mode}-{name}")
        copy_log(one.built["one"], dst)
        return dst

    if "C" in steps:
        out = os.path.join(work, f"{mode}-copy-out")
        note("C", step("copy", fresh("c"), env, out=out))
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(os.path.join(work, f"{mode}-c"), ignore_errors=True)
    if "E" in steps:
        duck = duckdb_step(fresh("e"), os.path.join(work, f"{mode}-duck.parquet"))
        if duck is not None:
            note("E", duck)
        shutil.rmtree(os.path.join(work, f"{mode}-e"), ignore_errors=True)
    if {"A", "D", "latest_state"} & set(steps):
        log_steps(one, fresh("a"), mode, env, note, steps, value_bytes)


def log_steps(
    one: Sized, st: str, mode: str, env: dict, note: Callable[[str, dict], None], steps: list[str], value_bytes: int
) -> None:
    """A (forced cleaning of the fresh log `st`), D (1% new records, then a cleaning), the latest state after D."""
    seg = {"segment_bytes": one.segment_bytes}
    if "A" in steps:
        note("A", step("clean", st, env, **seg))
    gen.append_updates(
        LogStore(st, gc_grace_s=0).log(LOG_NAME),
        gen.topic_config(one.segment_bytes),
        max(1, one.case.records // 100),
        one.case.keys,
        value_bytes,
        3,
    )
    if "D" in steps:  # without A, D cleans the fresh log and its new records at once
        note("D", step("clean", st, env, **seg))
    if "latest_state" in steps:
        out = os.path.join(one.work, f"{mode}-latest")
        note("latest_state", step("latest-state", st, env, out=out, **seg))
        shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(st, ignore_errors=True)


def ratios(res: dict) -> dict:
    """A / C, D / A, D's bytes over A's and the latest state over A, None where a step did not run."""

    def over(top: str, bottom: str, key: str = "wall_seconds") -> float | None:
        if top not in res or bottom not in res:
            return None
        return res[top][key] / max(1, res[bottom][key]) if key == "bytes_written" else res[top][key] / res[bottom][key]

    return {
        "A_over_C": over("A", "C"),
        "D_over_A": over("D", "A"),
        "D_bytes_over_A_bytes": over("D", "A", "bytes_written"),
        "latest_state_over_A": over("latest_state", "A"),
    }


def server_peak_rss_mib(connect_dir: str) -> float | None:
    """The Spark Connect server JVM's peak resident memory so far (VmHWM), from its pid file."""
    for name in os.listdir(connect_dir):
        if name.endswith(".pid"):
            with open(os.path.join(connect_dir, name)) as f:
                return peak_rss_mib(int(f.read().strip()))
    return None


def peak_rss_mib(pid: int) -> float | None:
    """A live process's peak resident memory (VmHWM in /proc), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def render(result: dict) -> str:
    """Per mode, each case's steps (wall s) and their growth over the previous case; then the ratios."""
    lines = []
    cases = result["cases"]
    for mode in ("cold", "warm"):
        rows = [c for c in cases if mode in c]
        if not rows:
            continue
        head = " | ".join(c["case"]["records"].__format__(",") + f" / {c['case']['keys']:,}" for c in rows)
        lines += [f"{mode}:", "", f"| step | {head} |", "|---|" + "---|" * len(rows)]
        for name, label in STEP_LABELS.items():
            if not any(name in c[mode] for c in rows):
                continue
            cells, prev = [], None
            for c in rows:
                r = c[mode].get(name)
                if r is None:
                    cells.append("")
                    continue
                growth = "" if prev is None else f" (x{r['wall_seconds'] / prev['wall_seconds']:.1f}{paired(prev, r)})"
                spread = r.get("wall_runs") or []
                spread = f" [{min(spread):.2f}-{max(spread):.2f}]" if len(spread) > 1 else ""
                cells.append(f"{r['wall_seconds']:.2f} s{spread}{growth}")
                prev = r
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        prev_records = None
        data = []
        for c in rows:
            data.append("" if prev_records is None else f"x{c['case']['records'] / prev_records:.1f}")
            prev_records = c["case"]["records"]
        lines.append("| growth of the data | " + " | ".join(data) + " |")
        for key in ("A_over_C", "D_over_A", "D_bytes_over_A_bytes", "latest_state_over_A"):
            vals = [c[mode]["ratios"].get(key) for c in rows]
            lines.append(
                f"| {key.replace('_over_', ' / ').replace('_', ' ')} | "
                + " | ".join("" if v is None else f"{v:.3f}" for v in vals)
                + " |"
            )
        lines.append("| peak RSS of a step, driver / JVM (MiB) | " + " | ".join(peaks(c[mode]) for c in rows) + " |")
        lines.append(
            "| load average (1 min) after A | "
            + " | ".join(f"{c[mode]['A']['load'][0]:.1f}" if "A" in c[mode] else "" for c in rows)
            + " |"
        )
        lines.append("")
    return "\n".join(lines)


def paired(smaller: dict, larger: dict) -> str:
    """The growth of a step taken round by round (the median, and the spread of three rounds or more), as
    text: a round's two runs are minutes apart, so the machine's drift between rounds cancels."""
    pairs = sorted(b / a for a, b in zip(smaller.get("wall_runs") or [], larger.get("wall_runs") or []))
    if len(pairs) < 2:
        return ""
    spread = f" [{pairs[0]:.1f}-{pairs[-1]:.1f}]" if len(pairs) > 2 else ""
    return f"; by round x{pairs[len(pairs) // 2]:.1f}{spread}"


def peaks(res: dict) -> str:
    """The largest peak RSS of the mode's steps: the step's process, and its JVM or the Connect server."""
    steps = [r for r in res.values() if isinstance(r, dict) and "wall_seconds" in r]
    driver = max((r.get("max_rss_mib") or 0 for r in steps), default=0)
    jvm = max((r.get("jvm_max_rss_mib") or r.get("server_max_rss_mib") or 0 for r in steps), default=0)
    return f"{driver:.0f} / {jvm:.0f}" if driver or jvm else ""


def case_log(work: str, case: Case, args, segment_bytes: int) -> dict:
    """The case's pristine log: generated (bench/gen.py, deterministic), or one an earlier --keep run left."""
    pristine = os.path.join(work, "pristine")
    if args.keep and os.path.isdir(pristine):
        manifest = LogStore(pristine, gc_grace_s=0).log(LOG_NAME).manifest()
        print(f"{case.name}: reusing {pristine}", file=sys.stderr)
        return {
            "one": pristine,
            "log_bytes": sum(_disk(pristine).values()),
            "log_segments": len(manifest.segments),
            "log_files": sum(len(s.files) for s in manifest.segments),
        }
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    t = time.perf_counter()
    built = build(work, case.records, case.keys, args.value_bytes, 0, 0, 10, segment_bytes)
    print(
        f"{case.name}: generated in {time.perf_counter() - t:.1f}s ({built['log_bytes'] / 2**20:.1f} MiB in "
        f"{built['log_segments']} segments, {built['log_files']} files)",
        file=sys.stderr,
    )
    return built


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["5000000", "20000000", "50000000", "50000000/50000000"])
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--mode", choices=("cold", "warm", "both"), default="both")
    ap.add_argument(
        "--steps",
        nargs="+",
        default=["C", "A", "D", "latest_state"],
        help="of C, E, A, D, latest_state (D and the latest state follow 1%% new records)",
    )
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench-out", "sweep"))
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "results", "sweep-latest.json"))
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep each case's generated log under --workdir and "
        "reuse one kept by an earlier run (50M records take minutes to write)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each mode's steps this many times in turn and "
        "report each step's median (this machine's runs vary 1.2-1.7x from one to the next)",
    )
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's JSON and stop")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {args.repeat}")
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)))
        return
    # the modules compiled, as scripts/setup.sh leaves them: a module edited since is otherwise compiled
    # again by every step's process (where PYTHONDONTWRITEBYTECODE is set), 30 ms of a step's start
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "compaction_assets", "bench"],
        cwd=REPO,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    result: dict = {"params": vars(args), "cases": [], "load_start": os.getloadavg()}
    sized = []
    for case in map(parse_case, args.cases):  # every case's log first: the rounds go through them all
        work = os.path.join(args.workdir, f"{case.records}-{case.keys}-{case.files}")
        segment_bytes = -(-case.records * (16 + gen.KEY_BYTES + args.value_bytes) // case.files)
        sized.append(Sized(case, work, case_log(work, case, args, segment_bytes), segment_bytes))
        result["cases"].append(
            {"case": asdict(case), **{k: sized[-1].built[k] for k in ("log_bytes", "log_segments", "log_files")}}
        )
    for mode in ("cold", "warm") if args.mode == "both" else (args.mode,):
        for entry, res in zip(result["cases"], measure_mode(mode, sized, args.steps, args.value_bytes, args.repeat)):
            entry[mode] = res
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:  # after every mode: a long sweep stopped early keeps what it measured
            json.dump({**result, "load_end": os.getloadavg()}, f, indent=1, default=str)
    if not args.keep:
        for one in sized:
            shutil.rmtree(one.work, ignore_errors=True)
    print(render(result))


if __name__ == "__main__":
    main()
