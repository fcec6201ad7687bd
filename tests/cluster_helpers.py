"""Real Spark services for tests/e2e/test_cluster.py: a standalone master and worker, and a Spark Connect
server, each started on 127.0.0.1 with free ports in its own process group and stopped by its ids.

Drivers that talk to them run as subprocesses (only one SparkSession per Python process, and the test
process already holds the local one); `driver_env` gives them the environment they need.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the project (this worktree)
PYTHON = os.path.abspath(sys.executable)  # drivers, executors and workers all use it
SPARK_ENV = (
    "SPARK_MASTER",
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "PYSPARK_SUBMIT_ARGS",
    "SPARK_DRIVER_HOST",
    "SPARK_DRIVER_BIND_ADDRESS",
)


def java_missing_reason() -> str | None:
    """Why Spark cannot start here, or None when a Java runtime is available."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and os.access(os.path.join(java_home, "bin", "java"), os.X_OK):
        return None
    if shutil.which("java"):
        return None
    return "no Java runtime (java on PATH or JAVA_HOME): a real Spark cluster cannot start"


def java_skip() -> bool:
    """Skip a cluster test for want of Java, except under CI=true, where the test runs and fails naming it."""
    return java_missing_reason() is not None and os.environ.get("CI") != "true"


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(tmp: Path) -> dict:
    """Environment for services and drivers: same Python everywhere, this worktree's package first,
    everything bound to loopback, logs and pid files under `tmp`."""
    env = {k: v for k, v in os.environ.items() if k not in SPARK_ENV}
    path = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env.update(
        {
            "PYSPARK_PYTHON": PYTHON,
            "PYSPARK_DRIVER_PYTHON": PYTHON,
            "PYTHONPATH": os.pathsep.join(path),
            "SPARK_HOME": spark_home(),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(tmp / "logs"),
            "SPARK_PID_DIR": str(tmp / "pids"),
            "SPARK_IDENT_STRING": "compaction-tests",
        }
    )
    env.pop("SPARK_NO_DAEMONIZE", None)  # the connect script must daemonize (pid file, then return)
    (tmp / "logs").mkdir(parents=True, exist_ok=True)
    (tmp / "pids").mkdir(parents=True, exist_ok=True)
    return env


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return f"({path} unreadable)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen | None, pgid: int | None, timeout: float = 15.0) -> None:
    """SIGTERM the process group we started (its own session), then SIGKILL what is left."""
    if pgid is None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc is not None:
                proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            continue
        break
    if proc is not None:
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _json(url: str, timeout: float = 2.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


class StandaloneCluster:
    """`spark-class` Master and Worker (the pip package's sbin has no start-master.sh)."""

    def __init__(self, tmp: Path, cores: int = 4, memory: str = "3g"):
        self.tmp = tmp
        self.cores, self.memory = cores, memory
        self.env = base_env(tmp)
        self.port, self.webui, self.worker_webui = free_port(), free_port(), free_port()
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        log = self.tmp / "logs" / f"{name}.out"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                env=self.env,
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append((name, proc, log))
        return proc

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc, log in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"spark {name} exited with {proc.returncode} while waiting for {what}:\n{_tail(log)}"
                    )
            try:
                if ready():
                    return
            # a UI that answers with its HTML page is still attaching its handlers: the master's binds its port
            # before `/json/` is routed, and under load that window lasts long enough to be asked in it
            except (OSError, json.JSONDecodeError):
                pass
            time.sleep(0.5)
        logs = "\n".join(f"--- {n}\n{_tail(log)}" for n, _, log in self.procs)
        raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{logs}")

    def master_state(self) -> dict:
        return _json(f"http://127.0.0.1:{self.webui}/json/")

    def start(self, timeout: float = 90.0) -> StandaloneCluster:
        (self.tmp / "work").mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.webui),
        )
        self._wait("the master's web UI", lambda: self.master_state().get("status") == "ALIVE", timeout)
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            self.url,
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            str(self.worker_webui),
            "--work-dir",
            str(self.tmp / "work"),
        )
        self._wait("a registered worker", lambda: self.master_state().get("aliveworkers", 0) >= 1, timeout)
        return self

    def stop(self) -> None:
        for _, proc, _ in reversed(self.procs):  # worker first, then master
            stop_group(proc, proc.pid)

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{_tail(log)}" for n, _, log in self.procs)


class ConnectServer:
    """`sbin/start-connect-server.sh` (spark-daemon.sh: pid and log files under SPARK_PID_DIR/SPARK_LOG_DIR)."""

    def __init__(self, tmp: Path, master: str = "local[2]", extra_conf: dict | None = None):
        self.tmp = tmp
        self.env = base_env(tmp)
        self.port = free_port()
        self.master = master
        self.extra_conf = extra_conf or {}
        self.pgid: int | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _script(self, name: str) -> str:
        return os.path.join(spark_home(), "sbin", name)

    def pid_file(self) -> Path | None:
        found = sorted((self.tmp / "pids").glob("*SparkConnectServer*.pid"))
        return found[0] if found else None

    def server_pid(self) -> int | None:
        f = self.pid_file()
        try:
            return int(f.read_text().strip()) if f else None
        except (OSError, ValueError):
            return None

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{_tail(p)}" for p in sorted((self.tmp / "logs").glob("*.out")))

    def start(self, timeout: float = 150.0) -> ConnectServer:
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            **self.extra_conf,
        }
        args = ["bash", self._script("start-connect-server.sh"), "--master", self.master]
        for k, v in conf.items():
            args += ["--conf", f"{k}={v}"]
        launcher = subprocess.Popen(
            args,
            env=self.env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pgid = launcher.pid  # the daemonized server stays in this process group
        out, _ = launcher.communicate(timeout=60)
        if launcher.returncode != 0:
            raise RuntimeError(f"start-connect-server.sh exited with {launcher.returncode}: {out.decode()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.server_pid()
            if pid is not None and not _alive(pid):
                raise RuntimeError(f"the Spark Connect server (pid {pid}) exited during start-up:\n{self.logs()}")
            if _port_open(self.port):
                return self
            time.sleep(0.5)
        raise RuntimeError(
            f"the Spark Connect server did not listen on {self.port} within {timeout:.0f}s:\n{self.logs()}"
        )

    def stop(self) -> None:
        try:
            subprocess.run(
                ["bash", self._script("stop-connect-server.sh")],
                env=self.env,
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            pass
        pid = self.server_pid()
        if pid is not None and _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stop_group(None, self.pgid, timeout=10.0)


def driver_env(tmp: Path, *, master: str | None = None, remote: str | None = None, **extra: str) -> dict:
    """Environment of a driver subprocess: SPARK_MASTER or SPARK_REMOTE, as operators set them."""
    env = base_env(tmp)
    if master:
        env["SPARK_MASTER"] = master
    if remote:
        env["SPARK_REMOTE"] = remote
    env.update(extra)
    return env


def run_driver(args: list[str], env: dict, *, timeout: float = 1200.0) -> subprocess.CompletedProcess:
    """Run `python args...` from the project root; fail with the command's output when it fails."""
    proc = subprocess.run(
        [PYTHON, *args], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"`python {' '.join(args)}` exited with {proc.returncode}\n"
            f"--- stderr (tail)\n{proc.stderr[-6000:]}\n--- stdout (tail)\n{proc.stdout[-3000:]}"
        )
    return proc


# ---------------------------------------------------------------------------------------------------
# the cleaning scenario, run identically by the test process (local mode) and by driver subprocesses
# ---------------------------------------------------------------------------------------------------

SEED = 4242
COMMON_CONFIG = {
    "segment.bytes": 400,
    "segment.ms": 5000,
    "min.cleanable.dirty.ratio": 0.0,
    "min.compaction.lag.ms": 0,
    "delete.retention.ms": 2000,
}
TOPICS = {
    "offsets": {"compaction.strategy": "offset"},
    "stamps": {"compaction.strategy": "timestamp"},
    "versions": {"compaction.strategy": "header", "compaction.strategy.header": "v"},
}
LOGS = [f"{topic}-0" for topic in TOPICS]
RECORDS_PER_BATCH = 80
ROUNDS = 2


def round_start(rnd: int) -> int:
    return 1_000_000 * (rnd + 1)


def round_now(rnd: int) -> int:
    """A cleaning time past every record of the round's batch and its active segment's deadline."""
    return round_start(rnd) + RECORDS_PER_BATCH * 100 + 60_000


def topic_config(topic: str):
    from compaction_assets.topics.config import build_config

    return build_config({**COMMON_CONFIG, **TOPICS[topic]})


def batch(topic: str, rnd: int) -> list[dict]:
    """A deterministic batch (fixed seed per topic and round):
    - 80 records over keys k{5*rnd}..k{5*rnd+9}, so half of the previous round's keys are not written
      again and their tombstones expire; ~15% tombstones; out-of-order timestamps for `stamps`,
      version headers (some missing) for `versions`, a few other headers (some with null values);
    - deletes of k{5*rnd} and k{5*rnd+1} that win under every strategy;
    - from round 1 on, for `stamps` and `versions`, late writes of the keys deleted the round before,
      which lose to those deletes (so expired deletes are remembered);
    - a tail of recent records that keeps the active segment unsealed at round_now(rnd), with, for
      `versions`, a losing write of a key deleted in this round's cleanable range (a held tombstone).
    """
    import random

    idx = list(TOPICS).index(topic)
    rng = random.Random(SEED * 100 + idx * 10 + rnd)
    strategy = TOPICS[topic]["compaction.strategy"]
    t0 = round_start(rnd)

    def rec(key: int, value: bytes | None, ts: int, version: int | None = None, extra: bool = False) -> dict:
        headers = []
        if strategy == "header" and version is not None:
            headers.append(("v", version.to_bytes(8, "big", signed=True)))
        if extra:
            headers.append(("trace", None if rng.random() < 0.3 else f"t{ts}".encode()))
        return {"key": f"k{key:02d}".encode(), "value": value, "timestamp": ts, "headers": headers}

    out = []
    for i in range(RECORDS_PER_BATCH):
        value = None if rng.random() < 0.15 else (f"{topic}-{rnd}-{i}-" + "x" * rng.randrange(30)).encode()
        ts = t0 + i * 100 + (rng.randint(-900, 300) if strategy == "timestamp" else 0)
        version = rng.randrange(-5, 40) if rng.random() < 0.85 else None
        out.append(rec(5 * rnd + rng.randrange(10), value, ts, version, extra=rng.random() < 0.2))
        if rnd and strategy != "offset" and i in (20, 50):  # late writes of the previous round's deletes
            out.append(rec(5 * (rnd - 1) + (i == 50), f"late-{rnd}-{i}".encode(), round_start(rnd - 1) + 10, 1))
    for k in (0, 1):
        out.append(rec(5 * rnd + k, None, t0 + RECORDS_PER_BATCH * 100 + 500, 100))
    recent = round_now(rnd) - 1000
    for j in range(3):
        out.append(rec(5 * rnd + 5 + j, f"recent-{rnd}-{j}".encode(), recent + j, 50))
    if strategy == "header":
        out.append(rec(5 * rnd, b"late-and-low", recent + 5, 0))
    return out


def append_round(root: str, rnd: int) -> None:
    from compaction_assets.log import writer
    from compaction_assets.store.log_store import LogStore

    store = LogStore(root, gc_grace_s=0)
    for topic in TOPICS:
        writer.append(store.log(f"{topic}-0"), topic_config(topic), batch(topic, rnd), source=f"round {rnd}")


def clean_round(root: str, rnd: int, spark) -> list[dict]:
    """The engine's evaluation and cleaning of every log at round_now(rnd), as the CLI runs it."""
    from compaction_assets.cleaning import engine
    from compaction_assets.store.log_store import LogStore

    store = LogStore(root, gc_grace_s=0)
    reports = []
    for topic in TOPICS:
        rep = engine.run(store.log(f"{topic}-0"), topic_config(topic), round_now(rnd), spark=spark)
        reports.append(json.loads(json.dumps(rep.as_dict(), default=str)))
    return reports


def later_rounds(root: str, spark) -> list[dict]:
    """Round 0 is appended by the caller; clean it, then append and clean every later round."""
    reports = clean_round(root, 0, spark)
    for rnd in range(1, ROUNDS):
        append_round(root, rnd)
        reports += clean_round(root, rnd, spark)
    return reports


def table_rounds(root: str, spark) -> list[dict]:
    """The cleaning scenario with every log's table committed after each round's cleaning (as the CLI commits
    it, on the Spark `spark` names when the log is past COMPACTION_TABLE_MAX_STATE_BYTES): each commit's
    figures and the way it took."""
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.table.commit.commit import commit_log

    store = LogStore(root, gc_grace_s=0)
    commits = []
    for rnd in range(ROUNDS):
        if rnd:
            append_round(root, rnd)
        clean_round(root, rnd, spark)
        for topic in TOPICS:
            r = commit_log(store.log(f"{topic}-0"), topic_config(topic), now=round_now(rnd))
            figures = (r.log_version, r.rows_added, r.rows_deleted, r.rows_masked, r.records_read)
            commits.append({"log": r.log, "figures": figures, "path": r.path})
    return commits


def table_contents(root: str) -> dict:
    """Every topic's table: its rows (sorted by key) and its current snapshot's marks and figures."""
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.table.reading.read import open_table, scan

    store = LogStore(root, gc_grace_s=0)
    out = {}
    for topic in TOPICS:
        table, _ = open_table(store.log(f"{topic}-0").st, topic)
        summary = table.current_snapshot().summary
        marks = {k: v for k, v in summary.additional_properties.items() if k.startswith("compaction.")}
        figures = {k: summary[k] for k in ("total-records", "total-position-deletes")}
        out[topic] = {"rows": sorted(scan(table, None, 0).to_pylist(), key=lambda r: r["key"]), **marks, **figures}
    return out


def log_contents(root: str, logs: list[str] = LOGS) -> dict:
    """Every log as data: bounds, checkpoint, segment ranges, guard state and all visible records."""
    from compaction_assets.log.reader import iter_records
    from compaction_assets.store.log_store import LogStore

    store = LogStore(root, gc_grace_s=0)
    out = {}
    for log in logs:
        h = store.log(log)
        m = h.manifest()
        out[log] = {
            "log_start_offset": m.log_start_offset,
            "log_end_offset": m.log_end_offset,
            "checkpoint": m.checkpoint,
            "segments": [(s.base_offset, s.next_offset, s.records) for s in m.segments],
            "holds": sorted((x.offset, x.horizon, x.until) for x in m.holds),
            "remembered": (m.remembered or {}).get("count", 0),
            "records": [
                (r.offset, r.key, r.value, r.timestamp, [tuple(x) for x in r.headers], r.delete_horizon)
                for r in iter_records(h)
            ],
        }
    return out


def report_summary(rep: dict) -> dict:
    """What must not depend on where Spark runs (timings and file names excluded)."""
    ev = rep["evaluation"]
    stats = rep.get("stats") or {}
    return {
        "log": rep["log"],
        "cleaned": rep["cleaned"],
        "reason": rep["reason"],
        "checkpoint": rep["checkpoint"],
        "first_dirty": ev["first_dirty_offset"],
        "first_uncleanable": ev["first_uncleanable_offset"],
        "stats": {
            k: stats.get(k)
            for k in (
                "records_read",
                "records_written",
                "records_superseded",
                "tombstones_stamped",
                "tombstones_removed",
                "bytes_read",
                "bytes_written",
            )
        },
        "retention": rep.get("retention"),
    }


# ---------------------------------------------------------------------------------------------------
# the Dagster scenario: one partition landed as JSON Lines, materialized through the code location
# ---------------------------------------------------------------------------------------------------

DAGSTER_TOPIC = "profiles"
DAGSTER_LOG = f"{DAGSTER_TOPIC}-0"
DAGSTER_ASSETS = "raw_segments,cleanable_range,compacted_log,latest_state"
DAGSTER_NOW = round_now(ROUNDS - 1)


def dagster_topics_yaml() -> str:
    defaults = ", ".join(f"{k}: {v}" for k, v in COMMON_CONFIG.items())
    return (
        f"defaults: {{{defaults}}}\n"
        f"topics:\n  {DAGSTER_TOPIC}: {{compaction.strategy: header, compaction.strategy.header: v}}\n"
    )


def write_dagster_inputs(base: Path) -> dict[str, str]:
    """Landing files (the `versions` batches of every round, as JSON Lines), a topics file and empty
    store and latest-state folders under `base`; returns the COMPACTION_* environment for them."""
    folder = base / "landing" / DAGSTER_TOPIC / "partition=0"
    folder.mkdir(parents=True)
    for rnd in range(ROUNDS):
        lines = []
        for r in batch("versions", rnd):
            headers = [
                [n, int.from_bytes(v, "big", signed=True) if n == "v" else (None if v is None else v.decode())]
                for n, v in r["headers"]
            ]
            lines.append(
                json.dumps(
                    {
                        "key": r["key"].decode(),
                        "value": None if r["value"] is None else r["value"].decode(),
                        "timestamp": r["timestamp"],
                        "headers": headers,
                    }
                )
            )
        (folder / f"round-{rnd}.jsonl").write_text("\n".join(lines) + "\n")
    (base / "topics.yaml").write_text(dagster_topics_yaml())
    return {
        "COMPACTION_STORE": str(base / "store"),
        "COMPACTION_LANDING": str(base / "landing"),
        "COMPACTION_TOPICS": str(base / "topics.yaml"),
        "COMPACTION_LATEST_STATE": str(base / "latest"),
    }


def dagster_run_config() -> dict:
    return {
        "ops": {
            "cleanable_range": {"config": {"now_ms": DAGSTER_NOW}},
            "compacted_log": {"config": {"now_ms": DAGSTER_NOW}},
        },
        "loggers": {"console": {"config": {"log_level": "WARNING"}}},
    }


def run_summary(instance, run_id: str) -> dict:
    """A run as stored in the instance: status, check results, and the materializations' metadata that
    must not depend on where Spark runs."""
    run = instance.get_run_by_id(run_id)
    checks, meta = {}, {}
    for entry in instance.all_logs(run_id):
        if entry.asset_check_evaluation is not None:
            ev = entry.asset_check_evaluation
            checks[ev.check_name] = ev.passed
        mat = entry.asset_materialization
        if mat is not None:
            # left out: timings, paths, config_changed_by (it names the topics file, in each run's folder)
            # and the Iceberg table's snapshot id (Iceberg draws it at random for every commit)
            meta[mat.asset_key.to_user_string()] = {
                k: v.value
                for k, v in mat.metadata.items()
                if k
                not in ("clean_time_secs", "path", "evaluated_at_ms", "files", "config_changed_by", "table_snapshot_id")
            }
    return {
        "status": run.status.value,
        "partition": run.tags.get("dagster/partition"),
        "checks": checks,
        "metadata": meta,
    }


def latest_state_rows(latest_root: str) -> dict:
    """The latest_state asset's Parquet output: {version folder: rows sorted by key}."""
    import pyarrow.parquet as pq

    folder = Path(latest_root) / DAGSTER_LOG
    out = {}
    for d in sorted(folder.glob("version=*")):
        table = pq.read_table(str(d)).sort_by("key")
        out[d.name] = table.select(["key", "value", "offset", "timestamp", "headers"]).to_pylist()
    return out


# Session settings compaction_assets.spark applies in every mode (under Connect, as session settings).
CHECKED_CONF = ("spark.sql.session.timeZone", "spark.sql.sources.partitionColumnTypeInference.enabled")


def _main(argv: list[str]) -> int:
    """`python -m tests.cluster_helpers scenario ROOT`: the scenario on the Spark that SPARK_MASTER or
    SPARK_REMOTE names (compaction_assets.spark.get_spark, as the CLI and Dagster use it); `tables ROOT`: the
    scenario with the tables committed after each round (`table_rounds`)."""
    if len(argv) != 2 or argv[0] not in ("scenario", "tables"):
        print("usage: python -m tests.cluster_helpers scenario|tables ROOT", file=sys.stderr)
        return 2
    from compaction_assets.spark import get_spark

    spark = get_spark()
    info = {
        "session": type(spark).__module__,  # pyspark.sql.connect.session under Spark Connect
        "conf": {k: spark.conf.get(k) for k in CHECKED_CONF},
    }
    try:
        info["master"] = spark.sparkContext.master
    except Exception:  # Spark Connect: no SparkContext on this side
        info["master"] = None
    if argv[0] == "tables":
        print(json.dumps({"info": info, "commits": table_rounds(argv[1], spark)}))
        return 0
    reports = later_rounds(argv[1], spark)
    print(json.dumps({"info": info, "reports": reports}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
