"""A cleaning at two commits, interleaved: A (a forced cleaning of a fresh log) and D (1% new records, then a
forced cleaning) of one log, each step its own process, cold or warm, CPU seconds of the step's process.

    PYTHONPATH=. .venv/bin/python -m bench.clean_ab --side before=/path/to/checkout --side after=. \
        [--records 2000000] [--keys 200000] [--segment-files 20] [--rounds 5] [--mode cold] [--json FILE]

Each side is a checkout of the product (with its own `.venv` or the same one): a step runs `bench.step
clean` from that folder, with `PYTHONPATH` pointed at it, so it imports that side's code only. The log is
generated once (bench/gen.py, by this checkout's code: the store's format is the same at both commits),
then every round copies it afresh for each side, in alternating order (before, after; then after, before),
so that a drift of the machine's load falls on both sides alike. cold: every step starts its own Spark
when it needs one; warm: one Spark Connect server (scripts/spark-connect.sh, this checkout's) answers
every step of both sides through SPARK_REMOTE. Reported: for each side and step, the median and range of
the CPU seconds (user + system) of the step's process, its wall seconds, and the cleaning's route; the
ratio after / before by round. Compare CPU seconds on a shared machine: wall time follows the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from compaction_assets.store.log_store import LogStore

from . import gen
from .modes import LOG_NAME, REPO, _children_cpu_seconds, _free_port, copy_log


def run_step(side: str, store: str, env: dict, segment_bytes: int) -> dict:
    """`bench.step clean` of `store` in its own process, with the code of the checkout at `side`."""
    cmd = [sys.executable, "-m", "bench.step", "clean", "--store", store, "--segment-bytes", str(segment_bytes)]
    side_env = {**env, "PYTHONPATH": side}
    cpu = _children_cpu_seconds()
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=side, env=side_env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    cpu = _children_cpu_seconds() - cpu
    if proc.returncode != 0:
        raise RuntimeError(f"{side}: bench.step clean failed: {proc.stderr.strip()[-1500:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"cpu_seconds": cpu, "wall_seconds": wall, "seconds": out.get("seconds"), "route": out.get("route")}


def one_round(sides: dict[str, str], order: list[str], pristine: str, work: str, env: dict, args) -> dict:
    """A and D of a fresh copy of the log for each side, in `order`."""
    out: dict = {}
    for name in order:
        store = os.path.join(work, f"round-{name}")
        copy_log(pristine, store)
        a = run_step(sides[name], store, env, args.segment_bytes)
        gen.append_updates(
            LogStore(store, gc_grace_s=0).log(LOG_NAME),
            gen.topic_config(args.segment_bytes),
            max(1, args.records // 100),
            args.keys,
            args.value_bytes,
            3,
        )
        d = run_step(sides[name], store, env, args.segment_bytes)
        out[name] = {"A": a, "D": d}
        print(
            f"  {name}: A cpu {a['cpu_seconds']:.2f}s wall {a['wall_seconds']:.2f}s; "
            f"D cpu {d['cpu_seconds']:.2f}s wall {d['wall_seconds']:.2f}s",
            file=sys.stderr,
        )
    return out


def summary(rounds: list[dict], sides: list[str]) -> dict:
    """Per side and step: the median and range of CPU and wall seconds; per step, after / before by round."""
    out: dict = {}
    for step in ("A", "D"):
        for side in sides:
            cpu = [r[side][step]["cpu_seconds"] for r in rounds]
            wall = [r[side][step]["wall_seconds"] for r in rounds]
            out[f"{step} {side}"] = {
                "cpu_median": statistics.median(cpu),
                "cpu_range": [min(cpu), max(cpu)],
                "wall_median": statistics.median(wall),
                "wall_range": [min(wall), max(wall)],
                "route": rounds[0][side][step]["route"],
            }
        first, second = sides
        ratios = [r[second][step]["cpu_seconds"] / r[first][step]["cpu_seconds"] for r in rounds]
        out[f"{step} {second} / {first}, CPU by round"] = {
            "median": statistics.median(ratios),
            "range": [min(ratios), max(ratios)],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--side", action="append", required=True, metavar="NAME=FOLDER", help="two, in order")
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--segment-files", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mode", choices=("cold", "warm"), default="cold")
    ap.add_argument("--workdir")
    ap.add_argument("--json")
    args = ap.parse_args()
    sides = dict(s.split("=", 1) for s in args.side)
    sides = {name: os.path.abspath(folder) for name, folder in sides.items()}
    assert len(sides) == 2, "two sides: --side before=DIR --side after=DIR"
    # SPEC §4 logical sizes, as bench/modes.py's --segment-files: 16 bytes, the key and the value a record
    args.segment_bytes = -(-args.records * (16 + gen.KEY_BYTES + args.value_bytes) // args.segment_files)
    work = args.workdir or tempfile.mkdtemp(prefix="clean-ab-")
    pristine = os.path.join(work, "pristine")
    if not os.path.isdir(pristine):
        cfg = gen.topic_config(args.segment_bytes)
        gen.generate(LogStore(pristine, gc_grace_s=0).log(LOG_NAME), cfg, args.records, args.keys, args.value_bytes, 1)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "PYTHONPATH")}
    server = None
    if args.mode == "warm":
        port = _free_port()
        server = {"SPARK_CONNECT_PORT": str(port), "SPARK_CONNECT_DIR": os.path.join(work, f"connect-{port}")}
        env["SPARK_REMOTE"] = subprocess.run(
            ["bash", "scripts/spark-connect.sh", "start"],
            cwd=REPO,
            env={**env, **server, "PYTHONPATH": REPO},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    names = list(sides)
    rounds = []
    try:
        for i in range(args.rounds):
            order = names if i % 2 == 0 else names[::-1]
            print(f"round {i + 1} ({', '.join(order)}), load {os.getloadavg()[0]:.1f}", file=sys.stderr)
            rounds.append(one_round(sides, order, pristine, work, env, args))
    finally:
        if server:
            subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=REPO, env={**env, **server})
    result = {
        "sides": sides,
        "mode": args.mode,
        "records": args.records,
        "keys": args.keys,
        "segment_bytes": args.segment_bytes,
        "rounds": rounds,
        "summary": summary(rounds, names),
    }
    print(json.dumps(result["summary"], indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
