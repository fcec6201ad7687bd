"""A fleet from landing to cleaned through the Dagster daemon, beside the CLI's fleet on the same data.

    .venv/bin/python -m bench.fleet_daemon [--logs 100] [--records 5000] [--json OUT]

As a platform team runs it: one warm Spark Connect server (SPARK_REMOTE, else `scripts/spark-connect.sh
start`, stopped at the end); `dagster-daemon run -w workspace.yaml` with the sensors on by default and the
instance as `scripts/ui.sh` writes it (the Spark pool's limit 2, the run queue looked at every second;
`--dequeue-interval 5` for Dagster's default). Files for `--logs` partitions of one
topic land under the landing area at once (a folder renamed into it); the clock runs until every log's
latest_state is recorded (landing -> ingested -> cleaned -> checked -> latest state), sensor intervals
included. Before either, `--warmup-logs` (50) logs of their own go through the CLI on the same server, so
that neither path pays a fresh server's warm-up. Then the CLI, on the same landing files into a store of
its own: `ingest`, then `clean --all` (two processes, timed from outside). Prints both, per log, and their
ratio; the runs the daemon started and the most that were queued at once; and the CPU seconds of each
path: the daemon's processes (the daemon, its code server, the run workers; sampled) against the CLI's two
(exact), and the Spark Connect server's during each. `bench/landing_table.py` adds each log's landing ->
table time, read from the topic tables' snapshots.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = str(ROOT / ".venv" / "bin" / "python")
TOPIC = "fleet"
TOPICS = f"topics:\n  {TOPIC}: {{segment.ms: 60000, min.cleanable.dirty.ratio: 0.5}}\n"


def write_landing(staging: Path, logs: int, records: int, keys: int, seed: int = 7) -> None:
    """One JSON Lines file per partition, records an hour old (past the topic's segment.ms: due)."""
    rng = random.Random(seed)
    start = int(time.time() * 1000) - 3_600_000
    for p in range(logs):
        folder = staging / TOPIC / f"partition={p}"
        folder.mkdir(parents=True)
        lines = [
            json.dumps({"key": f"k{rng.randrange(keys)}", "value": "v" * 80, "timestamp": start + i})
            for i in range(records)
        ]
        (folder / f"{TOPIC}+{p}+0000000000.jsonl").write_text("\n".join(lines) + "\n")


def _env(work: Path, name: str, remote: str) -> dict:
    return {
        **os.environ,
        "SPARK_REMOTE": remote,
        "COMPACTION_STORE": str(work / name / "store"),
        "COMPACTION_LANDING": str(work / "landing"),
        "COMPACTION_TOPICS": str(work / "topics.yaml"),
        "COMPACTION_LATEST_STATE": str(work / name / "latest"),
    }


def _progress(instance) -> tuple[int, int, int]:
    """(logs with a latest_state recorded, runs queued, runs started so far)."""
    import dagster as dg

    # the partitions alone (one query), not every materialization record: at 1,000 logs, up to 3,000 records
    # read and deserialised twice a second would compete with the daemon the bench measures
    done = len(instance.get_materialized_partitions(dg.AssetKey("latest_state")))
    queued = instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.QUEUED]))
    return done, queued, instance.get_runs_count()


def _phases(instance, landed: float) -> list[dict]:
    """Per run: when it was requested and started (seconds after the landing), and its steps' durations."""
    out = []
    for rec in sorted(instance.get_run_records(), key=lambda r: r.create_timestamp):
        run = rec.dagster_run
        out.append(
            {
                "job": run.job_name,
                "logs": int(run.tags.get("compaction/batch_size", 1)),
                "requested_s": round(rec.create_timestamp.timestamp() - landed, 1),
                "started_s": round((rec.start_time or landed) - landed, 1),
                "ended_s": round(rec.end_time - landed, 1) if rec.end_time else None,
                "steps": {
                    s.step_key: round(s.end_time - s.start_time, 1) if s.end_time and s.start_time else None
                    for s in instance.get_run_step_stats(run.run_id)
                },
            }
        )  # None: unfinished
    return out


@dataclass
class CliRun:
    """The CLI's fleet: when it started (Unix seconds), each command's wall seconds and its process's CPU
    seconds (user + system, exact: the finished child's rusage)."""

    started_unix: float
    wall_s: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)


def _children_cpu() -> float:
    """User + system seconds of this process's finished (waited for) children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_cli_phases(work: Path, remote: str, name: str = "cli") -> CliRun:
    """`ingest` then `clean --all`, each its own process, each timed."""
    env = _env(work, name, remote)
    out = CliRun(time.time())
    for phase, command in (("ingest", ["ingest"]), ("clean", ["clean", "--all"])):
        t, cpu = time.monotonic(), _children_cpu()
        subprocess.run(
            [PY, "-m", "compaction_assets", *command],
            env=env,
            cwd=ROOT,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        out.wall_s[phase] = time.monotonic() - t
        out.cpu_s[phase] = _children_cpu() - cpu
    return out


def server_process(remote: str):
    """The Spark Connect server's JVM serving `remote` (sc://host:PORT), or None when it is not found here."""
    import psutil

    port = remote.rsplit(":", 1)[-1].strip("/")
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "java" and f"spark.connect.grpc.binding.port={port}" in (
            process.info["cmdline"] or []
        ):
            return process
    return None


class CpuWindow:
    """The CPU seconds (user + system) a process tree used between `begin` and `end`, sampled (bench/metrics.py's
    ProcSampler, every `interval` s: a process's last fraction of an interval, or one living less, is missed)."""

    def __init__(self, pid: int | None, interval: float = 0.5) -> None:
        from bench.metrics import ProcSampler

        self.sampler = ProcSampler(pid, interval).start() if pid is not None else None

    def begin(self) -> None:
        if self.sampler is not None:
            self.sampler.begin()

    def end(self) -> float | None:
        """The window's CPU seconds (None: no process to sample); the sampling stops."""
        if self.sampler is None:
            return None
        cpu = self.sampler.end()["cpu_total"]
        self.sampler.stop()
        return round(cpu, 2)


def run_daemon(work: Path, staging: Path, logs: int, remote: str, timeout: float, dequeue_interval_s: int) -> dict:
    """Start the daemon, land the files at once, wait until every log's history is recorded."""
    import dagster as dg

    from compaction_assets.demo import instance_yaml

    home = work / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(instance_yaml(dequeue_interval_s))
    env = {**_env(work, "dagster", remote), "DAGSTER_HOME": str(home)}
    os.environ["DAGSTER_HOME"] = str(home)
    # the SQLite storages created here, before the daemon and its code server open them at once (two
    # processes creating a fresh schema race: "more than one head present")
    dg.DagsterInstance.get().dispose()
    log = open(work / "daemon.log", "w")
    daemon = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "dagster-daemon"), "run", "-w", "workspace.yaml"],
        env=env,
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # the daemon, its code server and the run workers it launches (all below it); the server's JVM apart
    daemon_cpu, server_cpu = CpuWindow(daemon.pid), CpuWindow(getattr(server_process(remote), "pid", None))
    try:
        with dg.DagsterInstance.get() as instance:
            time.sleep(15)  # the daemon is up and its sensors have ticked once over an empty landing area
            (work / "landing").mkdir(exist_ok=True)
            daemon_cpu.begin()
            server_cpu.begin()
            t0, landed = time.monotonic(), time.time()
            os.rename(staging / TOPIC, work / "landing" / TOPIC)
            most_queued, done, runs, progress = 0, 0, 0, []
            while done < logs and time.monotonic() - t0 < timeout:
                time.sleep(0.5)
                done, queued, runs = _progress(instance)
                most_queued = max(most_queued, queued)
                if not progress or time.monotonic() - t0 >= progress[-1][0] + 30:  # the pace, every 30 s
                    progress.append([round(time.monotonic() - t0, 1), done])
            wall = time.monotonic() - t0
            cpu = {"daemon_processes_s": daemon_cpu.end(), "spark_server_s": server_cpu.end()}
            failed = instance.get_runs_count(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
            phases = _phases(instance, time.time() - wall)
        return {
            "wall_s": wall,
            "landed_unix": landed,
            "logs_done": done,
            "runs": runs,
            "most_queued": most_queued,
            "failed_runs": failed,
            "runs_detail": phases,
            "progress_s_done": progress + [[round(wall, 1), done]],
            "cpu": cpu,
        }
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
        log.close()


def warm_up(work: Path, remote: str, logs: int, records: int, keys: int | None) -> float:
    """A fleet of its own through the CLI on the same server, untimed for the comparison: the server's JIT
    and caches warm, as a long-lived server's are, before either path is timed (else the first path pays)."""
    if logs <= 0:
        return 0.0
    side = work / "warmup"
    write_landing(side / "staging", logs, records, keys or max(1, records // 10), seed=11)
    (side / "landing").mkdir(parents=True)
    os.rename(side / "staging" / TOPIC, side / "landing" / TOPIC)
    (side / "topics.yaml").write_text(TOPICS)
    return sum(run_cli_phases(side, remote, "cli").wall_s.values())


def measure(
    logs: int,
    records: int,
    keys: int | None,
    workdir: str | None,
    timeout: float,
    dequeue_interval_s: int = 1,
    warmup_logs: int = 50,
) -> dict:
    """Both paths on the same landed files; the figures as a dict."""
    load_before = os.getloadavg()
    work = Path(workdir or tempfile.mkdtemp(prefix="fleet-daemon-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "topics.yaml").write_text(TOPICS)
    own = not os.environ.get("SPARK_REMOTE")
    remote = (
        os.environ.get("SPARK_REMOTE")
        or subprocess.run(
            ["bash", "scripts/spark-connect.sh", "start"], cwd=ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
    )
    try:
        warmup_s = warm_up(work, remote, warmup_logs, records, keys)
        staging = work / "staging"
        write_landing(staging, logs, records, keys or max(1, records // 10))
        daemon = run_daemon(work, staging, logs, remote, timeout, dequeue_interval_s)
        server_cpu = CpuWindow(getattr(server_process(remote), "pid", None))
        server_cpu.begin()
        cli_run = run_cli_phases(work, remote)
        cli_server_cpu = server_cpu.end()
        cli = sum(cli_run.wall_s.values())
    finally:
        if own:
            subprocess.run(["bash", "scripts/spark-connect.sh", "stop"], cwd=ROOT, check=False)
        if not workdir:
            shutil.rmtree(work, ignore_errors=True)
    return {
        "logs": logs,
        "records": records,
        "dequeue_interval_s": dequeue_interval_s,
        "warmup_logs": warmup_logs,
        "warmup_s": warmup_s,
        "dagster": daemon,
        "cli_wall_s": cli,
        "cli_phases_s": cli_run.wall_s,
        "cli_started_unix": cli_run.started_unix,
        "cli_cpu": {"processes_s": round(sum(cli_run.cpu_s.values()), 2), "spark_server_s": cli_server_cpu},
        "dagster_per_log_s": daemon["wall_s"] / logs,
        "cli_per_log_s": cli / logs,
        "ratio": daemon["wall_s"] / cli,
        "load_average": [load_before[0], os.getloadavg()[0]],
    }


def arguments(description: str) -> argparse.ArgumentParser:
    """The bench's options (bench/landing_table.py takes the same)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--logs", type=int, default=100)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--keys", type=int, help="distinct keys per log (default records / 10)")
    ap.add_argument("--workdir", help="keep the files here (default: a temporary folder, removed)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up on the daemon after this many seconds")
    ap.add_argument(
        "--dequeue-interval",
        type=int,
        default=None,
        help="the run queue's dequeue_interval_seconds (default: the product's, as ui.sh writes it)",
    )
    ap.add_argument(
        "--warmup-logs",
        type=int,
        default=50,
        help="logs cleaned through the CLI on the server before anything is timed (0: none)",
    )
    ap.add_argument("--json", help="also write the figures as JSON to this file")
    return ap


def measure_with(args: argparse.Namespace, workdir: str | None) -> dict:
    """`measure` with the parsed options, its files in `workdir` (None: a temporary folder, removed)."""
    from compaction_assets.demo import DEQUEUE_INTERVAL_S

    return measure(
        args.logs,
        args.records,
        args.keys,
        workdir,
        args.timeout,
        args.dequeue_interval or DEQUEUE_INTERVAL_S,
        args.warmup_logs,
    )


def print_figures(out: dict) -> None:
    """Both paths' figures, the daemon's runs, the CPU seconds and the ratio."""
    d = out["dagster"]
    print(
        f"{out['logs']} logs x {out['records']} records (the server warmed by {out['warmup_logs']} logs through "
        f"the CLI first, {out['warmup_s']:.1f} s)"
    )
    print(
        f"dagster daemon: {d['wall_s']:.1f} s ({out['dagster_per_log_s']:.3f} s a log), {d['runs']} runs, "
        f"at most {d['most_queued']} queued, {d['failed_runs']} failed, {d['logs_done']} logs done"
    )
    for run in d["runs_detail"]:
        print(
            f"  {run['job']} ({run['logs']} logs): requested at {run['requested_s']} s, started at "
            f"{run['started_s']} s, ended at {run['ended_s']} s; steps {run['steps']}"
        )
    c = out["cli_phases_s"]
    print(
        f"cli ingest + clean --all: {out['cli_wall_s']:.1f} s ({out['cli_per_log_s']:.3f} s a log; "
        f"ingest {c['ingest']:.1f} s, clean {c['clean']:.1f} s)"
    )
    print(
        f"CPU s: daemon's processes {d['cpu']['daemon_processes_s']} (Spark server {d['cpu']['spark_server_s']}); "
        f"CLI's {out['cli_cpu']['processes_s']} (Spark server {out['cli_cpu']['spark_server_s']})"
    )
    if d["logs_done"] < out["logs"]:  # the wall is the timeout's: compare what was done, per log
        print(
            f"not finished: {d['logs_done']} logs in {d['wall_s']:.1f} s, "
            f"{d['wall_s'] / max(1, d['logs_done']) / out['cli_per_log_s']:.1f} x the CLI per log done"
        )
    print(
        f"ratio dagster / cli: {out['ratio']:.2f} (load average {out['load_average'][0]:.1f} at the start, "
        f"{out['load_average'][1]:.1f} at the end)"
    )


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    out = measure_with(args, args.workdir)
    print_figures(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    if out["dagster"]["logs_done"] < out["logs"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
