"""What a short `compaction` command's process costs in two checkouts, run in interleaved pairs
(docs/performance.md, "The command line on click"):

    .venv/bin/python -m bench.cli_start BEFORE_CHECKOUT AFTER_CHECKOUT --store STORE [--pairs 30]

Each run is `compaction logs --store STORE` in a fresh process importing the checkout's package (its
PYTHONPATH), and records: the main thread's CPU from the import of the command line to the end of the
command (`time.thread_time`, the figure the least moved by other work on the machine), the whole process's
CPU (every thread, from getrusage of the child) and its wall time. Prints each side's medians and the
median difference by pair.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

# run in the measured process: the command line's import and one `logs`, its main thread's CPU on stderr
MEASURED = (
    "import sys, time; start = time.thread_time(); sys.argv = ['compaction', 'logs', '--store', sys.argv[1]]; "
    "from compaction_assets.cli import run; run(); sys.stdout.flush(); "
    "print((time.thread_time() - start) * 1000, file=sys.stderr)"
)


def one_run(checkout: str, store: str) -> tuple[float, float, float]:
    """(main-thread CPU, process CPU, wall) in ms of one `logs` from `checkout`."""
    env = {**os.environ, "PYTHONPATH": checkout}
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", MEASURED, store],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=True,
    )
    wall = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_cpu = (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000
    return float(proc.stderr.split()[-1]), process_cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the checkout to compare against (its root, holding compaction_assets/)")
    parser.add_argument("after", help="the checkout measured")
    parser.add_argument("--store", required=True, help="the store `logs` lists (a small one: the start is measured)")
    parser.add_argument("--pairs", type=int, default=30, help="interleaved pairs of runs (default 30)")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {"before": [], "after": []}
    for pair in range(args.pairs):
        for side in ("before", "after") if pair % 2 == 0 else ("after", "before"):
            runs[side].append(one_run(getattr(args, side), args.store))
    for side, rows in runs.items():
        medians = [statistics.median(row[i] for row in rows) for i in range(3)]
        print(f"{side}: main-thread CPU {medians[0]:.1f} ms, process CPU {medians[1]:.1f} ms, wall {medians[2]:.1f} ms")
    for i, what in enumerate(("main-thread CPU", "process CPU", "wall")):
        by_pair = statistics.median(a[i] - b[i] for a, b in zip(runs["after"], runs["before"]))
        print(f"after - before by pair, {what}: {by_pair:+.1f} ms")


if __name__ == "__main__":
    main()
