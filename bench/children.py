"""Timing a command in a process of its own (cold), from outside: its wall seconds and its CPU seconds (the
child's user + system time, all its threads, from `getrusage(RUSAGE_CHILDREN)`), and the medians of a
variant's rounds. Used by bench/append_table.py and bench/table_contenders.py."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ChildRun:
    """One child process's figures."""

    wall_s: float
    cpu_s: float


@dataclass(frozen=True)
class Rounds:
    """A variant's rounds: the medians and every round's figures, as the JSON reports print them."""

    wall_median_s: float
    cpu_median_s: float
    wall_s: list[float]
    cpu_s: list[float]

    @classmethod
    def of(cls, runs: list[ChildRun]) -> Rounds:
        return cls(
            wall_median_s=round(statistics.median(r.wall_s for r in runs), 3),
            cpu_median_s=round(statistics.median(r.cpu_s for r in runs), 3),
            wall_s=[round(r.wall_s, 3) for r in runs],
            cpu_s=[round(r.cpu_s, 3) for r in runs],
        )


def timed(argv: list[str], env: dict[str, str], cwd: str) -> ChildRun:
    """Run `argv` (which must succeed; its output is discarded) and return its wall and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return ChildRun(wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
