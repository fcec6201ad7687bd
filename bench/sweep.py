"""Performance as partitions grow: bench/modes.py's log steps at several sizes, each step's growth reported.

    PYTHONPATH=. .venv/bin/python -m bench.sweep [--cases 5000000 20000000 50000000 50000000/50000000]
                                                 [--mode both] [--steps C A D latest_state] [--json FILE]

A case is RECORDS[/KEYS[/FILES]]: KEYS defaults to RECORDS / 10 (10 records a key), FILES (segment
files of the fresh log) to one per 500,000 records and at least 20 (5M: 20 files, 20M: 40, as issue 32's
table). Each case's log is generated once (bench/gen.py), then measured cold and warm exactly as
bench/modes.py measures them (every step its own process, timed from outside; warm: one Spark Connect
server for the case), and its work folder is removed before the next case (50M records of 100 bytes is
about 7 GB a copy). Steps: C (Spark copies the files), A (forced cleaning of the fresh log), D (1% new
records, then a forced cleaning), the latest state; E (DuckDB) with `--steps ... E`. Each step's growth is
its time over the previous case's, beside the data's growth (records); the cleaning's route (decision
collected, probed or cached; only the touched keys grouped; write threads) is printed with A and D.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

from compaction_assets.log.store import LogStore

from . import gen
from .modes import LOG_NAME, REPO, _free_port, build, duckdb_step, step

RECORDS_PER_FILE = 500_000
STEP_LABELS = {"C": "C: Spark copy of the files", "A": "A: forced cleaning", "D": "D: 1% new, then a cleaning",
               "latest_state": "latest state", "E": "E: DuckDB dedup"}


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


def measure_mode(mode: str, work: str, built: dict, case: Case, segment_bytes: int, steps: list[str],
                 value_bytes: int) -> dict:
    """The case's steps in one mode (warm: a Connect server started for them), as bench/modes.py runs them."""
    env = {k: v for k, v in os.environ.items() if k != "SPARK_REMOTE"}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    server = None
    if mode == "warm":
        port = _free_port()
        server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": os.path.join(work, f"connect-{port}")}
        env["SPARK_REMOTE"] = subprocess.run(["bash", "scripts/spark-connect.sh", "start"], cwd=REPO,
                                             env={**env, **server}, capture_output=True, text=True,
                                             check=True).stdout.strip()
    res: dict = {}

    def fresh(name: str) -> str:
        dst = os.path.join(work, f"{mode}-{name}")
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(built["one"], dst)
        return dst

    def note(name: str, r: dict) -> None:
        r["load"] = os.getloadavg()
        res[name] = r
        route = f", route {r['route']}" if r.get("route") else ""
        if r.get("stats"):   # why a cleaning wrote what it wrote
            route += ", " + ", ".join(f"{k} {r['stats'][k]}" for k in ("segments_rewritten", "segments_marked",
                                                                         "records_rewritten", "deletion_vector_records"))
        print(f"  {case.records:,} {mode} {name}: wall {r['wall_seconds']:.2f}s (in process {r['seconds']:.2f}s), "
              f"{r['bytes_written'] / 2**20:.1f} MiB written, load {r['load'][0]:.1f}{route}", file=sys.stderr)
    try:
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
        st = fresh("a")
        seg = {"segment_bytes": segment_bytes}
        note("A", step("clean", st, env, **seg))
        gen.append_updates(LogStore(st, gc_grace_s=0).log(LOG_NAME), gen.topic_config(segment_bytes),
                           max(1, case.records // 100), case.keys, value_bytes, 3)
        note("D", step("clean", st, env, **seg))
        if "latest_state" in steps:
            out = os.path.join(work, f"{mode}-latest")
            note("latest_state", step("latest-state", st, env, out=out, **seg))
            shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(st, ignore_errors=True)
    finally:
        if server:
            subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
    a = res["A"]
    res["ratios"] = {"A_over_C": a["wall_seconds"] / res["C"]["wall_seconds"] if "C" in res else None,
                     "D_over_A": res["D"]["wall_seconds"] / a["wall_seconds"],
                     "D_bytes_over_A_bytes": res["D"]["bytes_written"] / max(1, a["bytes_written"]),
                     "latest_state_over_A": (res["latest_state"]["wall_seconds"] / a["wall_seconds"]
                                             if "latest_state" in res else None)}
    return res


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
                growth = "" if prev is None else f" (x{r['wall_seconds'] / prev['wall_seconds']:.1f})"
                cells.append(f"{r['wall_seconds']:.2f} s{growth}")
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
            lines.append(f"| {key.replace('_over_', ' / ').replace('_', ' ')} | " +
                         " | ".join("" if v is None else f"{v:.3f}" for v in vals) + " |")
        lines.append("| load average (1 min) during A | " +
                     " | ".join(f"{c[mode]['A']['load'][0]:.1f}" for c in rows) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["5000000", "20000000", "50000000", "50000000/50000000"])
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--mode", choices=("cold", "warm", "both"), default="both")
    ap.add_argument("--steps", nargs="+", default=["C", "A", "D", "latest_state"],
                    help="of C, E, latest_state (A and D always run)")
    ap.add_argument("--workdir", default=os.path.join(REPO, "bench-out", "sweep"))
    ap.add_argument("--json", default=os.path.join(REPO, "bench", "results", "sweep-latest.json"))
    ap.add_argument("--render", metavar="JSON", help="print the tables of an earlier run's JSON and stop")
    args = ap.parse_args(argv)
    if args.render:
        with open(args.render) as f:
            print(render(json.load(f)))
        return
    result: dict = {"params": vars(args), "cases": [], "load_start": os.getloadavg()}
    for case in map(parse_case, args.cases):
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
        segment_bytes = -(-case.records * (16 + gen.KEY_BYTES + args.value_bytes) // case.files)
        t = time.perf_counter()
        built = build(args.workdir, case.records, case.keys, args.value_bytes, 0, 0, 10, segment_bytes)
        print(f"{case.name}: generated in {time.perf_counter() - t:.1f}s ({built['log_bytes'] / 2**20:.1f} MiB in "
              f"{built['log_segments']} segments, {built['log_files']} files)", file=sys.stderr)
        entry = {"case": asdict(case), "log_bytes": built["log_bytes"], "log_segments": built["log_segments"],
                 "log_files": built["log_files"]}
        for mode in (("cold", "warm") if args.mode == "both" else (args.mode,)):
            entry[mode] = measure_mode(mode, args.workdir, built, case, segment_bytes, args.steps, args.value_bytes)
        result["cases"].append(entry)
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(os.path.dirname(args.json), exist_ok=True)
        with open(args.json, "w") as f:   # after every case: a long sweep stopped early keeps what it measured
            json.dump({**result, "load_end": os.getloadavg()}, f, indent=1, default=str)
    print(render(result))


if __name__ == "__main__":
    main()
