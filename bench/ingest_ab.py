"""`compaction ingest` of bench/table_contenders.py's change, from two checkouts, in interleaved rounds:

    python -m bench.table_contenders --records 5000000 --keys 500000 --change 0.01 --rounds 1 --work W
    python -m bench.ingest_ab --work W --before /path/to/checkout-a --after . [--rounds 8] [--no-table-too]

The contenders bench leaves its pristine store and the change's landing file under W (`--work`). Each run
here restores a fresh copy of the store and runs `ingest` (which commits the table) in a process of its own
with one checkout's code on PYTHONPATH (the same interpreter), timed from outside (bench/children.py: wall,
and CPU as the child's user + system time). The variants take turns, their order reversed every round, so
that the machine's other work falls on both alike. `--no-table-too` adds `ingest --no-table` of each. Prints
each variant's medians and rounds as one JSON object, and the after/before ratio of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

from bench.children import ChildRun, Rounds, timed
from bench.table_contenders import LOG, Places


def _env(checkout: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTION_", "SPARK_"))}
    return {**env, "PYTHONPATH": str(checkout.resolve()), "COMPACTION_TABLES": "1"}


def _argv(places: Places, table: bool) -> list[str]:
    store = str(places.live("store"))
    ingest = [
        sys.executable,
        "-m",
        "compaction_assets",
        "--store",
        store,
        "ingest",
        LOG,
        "--landing",
        str(places.landing),
    ]
    return ingest if table else [*ingest, "--no-table"]


def main() -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--work", required=True, help="the folder bench.table_contenders --work filled")
    p.add_argument("--before", required=True, type=Path, help="a checkout (its compaction_assets)")
    p.add_argument("--after", required=True, type=Path, help="another checkout")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--no-table-too", action="store_true", help="also `ingest --no-table` from each checkout")
    args = p.parse_args()
    places = Places(Path(args.work))
    if not places.pristine("store").is_dir() or not places.change.is_file():
        p.error(f"{args.work} has no pristine store and change: run bench.table_contenders with --work first")
    variants = [
        (side, table) for side in ("before", "after") for table in ((True, False) if args.no_table_too else (True,))
    ]
    runs: dict[str, list[ChildRun]] = {}
    for round_number in range(args.rounds):
        for side, table in variants if round_number % 2 == 0 else variants[::-1]:
            places.restore("store")
            name = f"{side}: ingest" + ("" if table else " --no-table")
            runs.setdefault(name, []).append(timed(_argv(places, table), _env(getattr(args, side)), args.work))
    shutil.rmtree(places.live("store"), ignore_errors=True)
    figures = {name: asdict(Rounds.of(r)) for name, r in runs.items()}
    before, after = figures["before: ingest"], figures["after: ingest"]
    print(
        json.dumps(
            {
                "before": str(args.before.resolve()),
                "after": str(args.after.resolve()),
                "rounds": args.rounds,
                "variants": figures,
                "after_over_before_cpu": round(after["cpu_median_s"] / before["cpu_median_s"], 3),
                "after_over_before_wall": round(after["wall_median_s"] / before["wall_median_s"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
