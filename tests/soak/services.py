"""The soak's deployment: the servers and the daemon, as an operator runs them, each one killable with SIGKILL
and restartable on the same ports and data (a crash and its recovery, not a fresh start)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster_helpers import ROOT, ConnectServer, stop_group
from tests.pg_server import PostgresServer, start_postgres
from tests.s3_server import S3Server, start_s3_server

LOCK_TTL_S = 20  # a killed run's leases expire within its steps' retries (10 s, then 20 s, then 40 s)


def instance_yaml() -> str:
    """docs/deployment.md's production instance block, as a user copies it."""
    from tests.defs.test_postgres_instance import deployment_yaml

    return deployment_yaml()


def topics_yaml(partitions: dict[str, int]) -> str:
    """Aiven's flat JSON Lines files (no extension: its default template); segments that roll every 20 s and
    a low dirty ratio, so that the sensors clean while files land; tombstones kept a day."""
    defaults = (
        "landing.format: aiven, landing.file.format: jsonl, segment.ms: 20000, "
        "min.cleanable.dirty.ratio: 0.2, min.compaction.lag.ms: 0, delete.retention.ms: 86400000"
    )
    return f"defaults: {{{defaults}}}\ntopics:\n" + "".join(f"  {t}: {{}}\n" for t in partitions)


@dataclass
class Daemon:
    """`dagster-daemon run -w workspace.yaml` in a session of its own: its code server and the run workers
    the code server starts stay in that session's process group, so the soak can find and end them."""

    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None
    groups: list[int] = field(default_factory=list)  # every group started, to end them all at the end

    def start(self) -> None:
        daemon = os.path.join(os.path.dirname(sys.executable), "dagster-daemon")
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [daemon, "run", "-w", "workspace.yaml"],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.groups.append(self.process.pid)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the daemon process alone, as a crash of it would: its code server notices the missing
        heartbeats and leaves once its runs end; the runs go on."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=30)

    def stop_all(self) -> None:
        """End every process group a daemon of this soak started (the daemon, code servers, run workers)."""
        for group in self.groups:
            stop_group(None, group, timeout=20.0)


def run_workers(groups: list[int]) -> list[int]:
    """The pids of the run workers alive in `groups`: the code server's `multiprocessing` spawn children
    (not its resource tracker)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmd = " ".join(proc.info["cmdline"] or [])
            if "spawn_main" in cmd and "resource_tracker" not in cmd and os.getpgid(proc.info["pid"]) in groups:
                found.append(proc.info["pid"])
        except (ProcessLookupError, psutil.Error):
            continue
    return found


@dataclass
class Deployment:
    """The running parts, and the environment the daemon, its runs and the soak's own checks read."""

    work: Path
    s3: S3Server
    pg: PostgresServer
    connect: ConnectServer
    daemon: Daemon
    env: dict[str, str]
    store_uri: str
    landing_uri: str

    def stop(self) -> None:
        for step in (self.daemon.stop_all, self.connect.stop, self.pg.stop, self.s3.stop):
            try:
                step()
            except Exception as exc:  # the others still stop
                print(f"soak: stopping: {exc}", file=sys.stderr)


def environment(work: Path, s3: S3Server, pg: PostgresServer, remote: str, store: str, landing: str) -> dict:
    """What an operator exports for the daemon: every setting named (docs/configuration.md)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "COMPACTION_", "DAGSTER_"))}
    path = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(s3.env)
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(path),  # the run workers import this worktree's package
            "DAGSTER_HOME": str(work / "dagster_home"),
            "DAGSTER_PG_URL": pg.url,
            "SPARK_REMOTE": remote,
            "COMPACTION_STORE": store,
            "COMPACTION_LANDING": landing,
            "COMPACTION_TOPICS": str(work / "topics.yaml"),
            "COMPACTION_LATEST_STATE": str(work / "latest"),
            "COMPACTION_TABLE_CATALOG_URI": f"sqlite:///{work}/catalog.db",
            "COMPACTION_LOCK_TTL_SECONDS": str(LOCK_TTL_S),
        }
    )
    return env


def start_deployment(work: Path, partitions: dict[str, int]) -> Deployment:
    """The servers, then the daemon over an empty landing area."""
    (work / "dagster_home").mkdir(parents=True)
    (work / "dagster_home" / "dagster.yaml").write_text(instance_yaml())
    (work / "topics.yaml").write_text(topics_yaml(partitions))
    s3 = start_s3_server()
    started: list = [s3]
    try:
        pg = start_postgres()
        started.append(pg)
        connect = ConnectServer(work / "connect", master="local[2]")
        started.append(connect)
        connect.start()
        store, landing = f"s3://{s3.new_bucket('store')}/store", f"s3://{s3.new_bucket('landing')}/landing"
        env = environment(work, s3, pg, connect.url, store, landing)
        daemon = Daemon(env, work / "daemon.log")
        daemon.start()
    except BaseException:
        for part in reversed(started):
            part.stop()
        raise
    return Deployment(work, s3, pg, connect, daemon, env, store, landing)


def wait_until(what: str, ready, timeout: float, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def kill_pid(pid: int) -> bool:
    """SIGKILL one process; False when it was already gone."""
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
