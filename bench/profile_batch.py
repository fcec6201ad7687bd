"""Where a batch run's time goes, per log: one `ingest_batch_job` in this process under cProfile.

    .venv/bin/python -m bench.profile_batch [--logs 200] [--records 5000] [--top 30] [--out prof.pstats]
                                            [--postgres]

Files for `--logs` partitions of one topic land (as bench/fleet_daemon.py writes them), the partitions are
added, and the batch job the discovery sensor would request runs in process against a SQLite instance
(the instance as scripts/ui.sh writes it) with a real Spark (SPARK_REMOTE, else local). Every thread is
profiled (the batch records its logs in pools of threads), and the functions that cost most are printed
with their seconds per log, beside each step's wall time per log. `--postgres`: the instance's storage
is a PostgreSQL server of its own on loopback (tests/pg_server.py; docs/deployment.md's instance).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench.fleet_daemon import TOPIC, TOPICS, write_landing

WAITS = ("acquire", "SimpleQueue", "sleep", "poll", "recv_into")  # built-ins a thread waits in
WRAPPERS = {"wait", "_worker", "run", "_bootstrap", "_bootstrap_inner", "forward", "readinto", "result"}


class AllThreads:
    """cProfile in this thread and every thread started while it is on (threading.setprofile)."""

    def __init__(self):
        self.profiles: list[cProfile.Profile] = []
        self._lock = threading.Lock()

    def _start(self, *_):
        profile = cProfile.Profile()
        with self._lock:
            self.profiles.append(profile)
        profile.enable()  # replaces this hook in the new thread with cProfile's own

    def __enter__(self):
        threading.setprofile(self._start)
        self._start()
        return self

    def __exit__(self, *exc):
        threading.setprofile(None)
        self.profiles[0].disable()

    def stats(self) -> pstats.Stats:
        """The merged statistics of every profiled thread."""
        for profile in self.profiles:
            profile.create_stats()
        return pstats.Stats(*self.profiles)


def prepare(work: Path, logs: int, records: int, postgres_url: str | None = None) -> list[str]:
    """The landing files, the environment the resources read, the instance's home; the logs' names."""
    (work / "topics.yaml").write_text(TOPICS)
    write_landing(work / "landing", logs, records, max(1, records // 10))
    home = work / "dagster_home"
    home.mkdir()
    from compaction_assets.demo import instance_yaml

    storage = f"storage:\n  postgres:\n    postgres_url: {postgres_url}\n" if postgres_url else ""
    (home / "dagster.yaml").write_text(instance_yaml() + storage)
    os.environ.update(
        {
            "COMPACTION_STORE": str(work / "store"),
            "COMPACTION_LANDING": str(work / "landing"),
            "COMPACTION_TOPICS": str(work / "topics.yaml"),
            "COMPACTION_LATEST_STATE": str(work / "latest"),
            "DAGSTER_HOME": str(home),
        }
    )
    return [f"{TOPIC}-{p}" for p in range(logs)]


def run_batch(logs: list[str]) -> tuple[float, dict[str, float], AllThreads]:
    """The ingest batch job over `logs`, profiled: its wall time, its steps' times, the profiles."""
    import dagster as dg

    from compaction_assets.definitions import defs
    from compaction_assets.defs.partitions import log_partitions

    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions(log_partitions.name, logs)
    job = defs.get_job_def("ingest_batch_job")
    run_config = {
        "ops": {"ingest_batch_op": {"config": {"logs": logs}}},
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
    }
    t = time.monotonic()
    with AllThreads() as profiler:
        result = job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
    wall = time.monotonic() - t
    steps = {
        s.step_key: s.end_time - s.start_time
        for s in instance.get_run_step_stats(result.run_id)
        if s.end_time and s.start_time
    }
    return wall, steps, profiler


def report(logs: int, wall: float, steps: dict[str, float], stats: pstats.Stats, top: int) -> None:
    """Print the steps and the costliest functions, by own time and by cumulative time, per log."""
    print(f"{logs} logs: batch run {wall:.1f} s ({wall / logs:.3f} s a log), load {os.getloadavg()[0]:.1f}")
    for step, seconds in steps.items():
        print(f"  {step}: {seconds:.1f} s ({seconds / logs:.3f} s a log)")
    # {(file, line, name): (primitive calls, calls, own, cumulative, callers)}; a thread waiting on a lock,
    # a queue or a socket (Spark's reply) is not this process's work: left out of both rankings
    rows = {k: v for k, v in stats.stats.items() if k[2] not in WRAPPERS and not any(w in k[2] for w in WAITS)}
    for title, index in (("own time", 2), ("cumulative time", 3)):
        print(f"top {top} by {title} (s a log, calls a log; every thread summed):")
        ranked = sorted(rows.items(), key=lambda kv: kv[1][index], reverse=True)[:top]
        for (file, line, name), (_, calls, own, cum, _) in ranked:
            where = f"{'/'.join(Path(file).parts[-2:])}:{line}({name})"
            print(f"  {own / logs:8.4f} own {cum / logs:8.4f} cum {calls / logs:9.1f} calls  {where}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--logs", type=int, default=200)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--out", help="also write the merged profile here (pstats format)")
    ap.add_argument("--postgres", action="store_true", help="the instance on a PostgreSQL server of its own")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profile-batch-"))
    server = None
    if args.postgres:
        from tests.pg_server import start_postgres

        server = start_postgres()
    try:
        logs = prepare(work, args.logs, args.records, server.url if server else None)
        wall, steps, profiler = run_batch(logs)
        stats = profiler.stats()
        if args.out:
            stats.dump_stats(args.out)
        report(len(logs), wall, steps, stats, args.top)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
