"""The Spark session the engine uses when the caller does not bring one."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from urllib.parse import urlparse

from compaction_assets import settings
from compaction_assets.errors import SparkSetupError

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # Adaptive execution submits every shuffle stage as a job of its own (a cleaning: 12 jobs instead
    # of 7, measured with bench/jobs.py); with 8 shuffle partitions it has little to coalesce.
    "spark.sql.adaptive.enabled": "false",
    # Listing many segment files would otherwise start a Spark job of its own (above 32 paths).
    "spark.sql.sources.parallelPartitionDiscovery.threshold": "1000000",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # The one cached table (a cleaning's decision) is read back once or twice and dropped: encoding it
    # (dictionaries of 500k distinct values, statistics per column) cost more than it saved.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    "spark.ui.showConsoleProgress": "false",
}
LOG4J = os.path.join(os.path.dirname(__file__), "log4j2.properties")


def _java_binary(env: settings.Settings) -> str | None:
    """The `java` that PySpark's launcher runs: JAVA_HOME's, else the first on PATH (None: not found)."""
    import shutil

    path = os.path.join(env.java_home, "bin", "java") if env.java_home else shutil.which("java")
    return os.path.realpath(path) if path and os.path.exists(path) else None


def class_archive_path(env: settings.Settings | None = None) -> str | None:
    """Where the driver JVM's class-data archive for this Java and this PySpark lives (None: no Java).

    A dynamic archive (JDK's AppCDS) holds the classes a cleaning loads, parsed and verified once, so a
    JVM maps them instead of loading them again: a command's JVM starts in about half the time. It is
    valid only for the JVM and class path it was made with, so its name carries both."""
    import hashlib

    import pyspark

    env = env or settings.current()
    java = _java_binary(env)
    if java is None:
        return None
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    stamp = f"{java}:{os.stat(java).st_mtime_ns}:{pyspark.__version__}:{jars}"
    key = hashlib.sha1(stamp.encode()).hexdigest()[:16]
    return os.path.join(env.jvm_archive_dir, f"spark-driver-{pyspark.__version__}-{key}.jsa")


def driver_java_options(
    env: settings.Settings, *, dump_archive_to: str | None = None, class_archive: bool = True
) -> str:
    """The driver JVM's options: the log4j configuration, and for quick starts C1 only with the class-data
    archive (read when it exists, or written at exit to `dump_archive_to`; none without `class_archive`)."""
    options = [f"-Dlog4j.configurationFile=file:{LOG4J}"]
    if env.jvm_quick_start:
        # A command lives seconds: the optimizing compiler (C2) would spend them, on 2 cores, compiling
        # code it barely runs (measured: a cold cleaning of 2M records 15.0 s -> 11.8 s with C1 only).
        options.append("-XX:TieredStopAtLevel=1")
        if dump_archive_to:
            options.append(f"-XX:ArchiveClassesAtExit={dump_archive_to}")
        elif class_archive:
            archive = class_archive_path(env)
            if archive and os.path.isfile(archive):
                options.append(f"-XX:SharedArchiveFile={archive}")
        # the JVM's own warnings go to stderr, never into a command's output on stdout
        options += ["-Xlog:disable", "-Xlog:all=warning:stderr"]
    return " ".join(options)


def connect_server_java_options(env: settings.Settings | None = None) -> str:
    """The JVM options of a local Spark Connect server (scripts/spark-connect.sh): the log4j configuration,
    and with the quick start the fast compiler only.

    A server lives long, but on few cores the optimizing compiler competes with the queries for them, and
    every cleaning brings newly generated classes to compile (2 cores, a fresh server, 5M records: the
    first forced cleaning 11.4 s -> 10.2 s, an incremental one after it 3.0 s -> 2.3 s, later ones
    2.0 s -> 1.6 s; a second forced cleaning 6.7 s -> 7.2 s). The class-data archive is the driver's: a
    server's class path differs."""
    return driver_java_options(env or settings.current(), class_archive=False)


def session_target() -> dict:
    """Where the settings send a session: {spark.remote} or {spark.master} (no JVM options worked out)."""
    env = settings.current()
    if env.spark_remote:
        return {"spark.remote": env.spark_remote}
    return {"spark.master": env.spark_master or settings.DEFAULT_SPARK_MASTER}


def spark_conf_from_env(extra: dict | None = None, *, dump_archive_to: str | None = None) -> dict:
    """Spark settings: SPARK_REMOTE (sc://...) or SPARK_MASTER (local[*], spark://...), plus defaults."""
    env = settings.current()
    conf = dict(DEFAULT_CONF)
    target = session_target()
    if "spark.remote" in target:
        # Spark Connect: the server owns the JVM settings; the SQL settings are session settings, which
        # the Connect client applies to its session (same semantics as a local or cluster session).
        conf = {**target, **{k: v for k, v in DEFAULT_CONF.items() if k.startswith("spark.sql.")}}
    else:
        conf.update(target)
        conf["spark.driver.extraJavaOptions"] = driver_java_options(env, dump_archive_to=dump_archive_to)
        if conf["spark.master"].startswith("local"):
            # A local session serves this machine only: bind the driver to loopback.
            conf["spark.driver.host"] = env.spark_driver_host or "127.0.0.1"
            conf["spark.driver.bindAddress"] = env.spark_driver_bind_address or "127.0.0.1"
        else:
            # On a cluster, executors connect back to the driver: the address they must use, when the
            # host's default (its hostname) is not it.
            for value, key in (
                (env.spark_driver_host, "spark.driver.host"),
                (env.spark_driver_bind_address, "spark.driver.bindAddress"),
            ):
                if value:
                    conf[key] = value
        if env.spark_driver_memory:
            conf["spark.driver.memory"] = env.spark_driver_memory
    conf.update(extra or {})
    _default_worker_python(conf.get("spark.master", ""))
    return conf


def _default_worker_python(master: str) -> None:
    """Python workers (the segment rewrite) on this machine run this interpreter unless told otherwise.
    PySpark reads PYSPARK_PYTHON when the session starts, whoever starts it (this module or Dagster's
    resource), and otherwise runs `python3`, which may lack pyarrow."""
    if master.startswith("local") or "://127.0.0.1:" in master or "://localhost:" in master:
        settings.export_default(settings.PYSPARK_PYTHON, sys.executable)


CONNECT_TIMEOUT_S = 5.0
_LOCAL_MASTER_RE = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?")
_MASTER_RE = re.compile(_LOCAL_MASTER_RE.pattern + r"|local-cluster\[.+\]|yarn|(spark|k8s|mesos)://.+")


def local_master_cores(master: str) -> int | None:
    """The cores a local master (local, local[N], local[*], local[N,F]) runs tasks on, capped by this
    machine's; None for any other master."""
    match = _LOCAL_MASTER_RE.fullmatch(master.strip())
    if match is None:
        return None
    cores = os.cpu_count() or 1
    wanted = match.group(2)
    if wanted is None:
        return 1
    return cores if wanted == "*" else min(int(wanted), cores)


def check_spark_settings(conf: dict) -> None:
    """Refuse, before a JVM starts, a master that is not a Spark master URL and a Connect endpoint that does
    not answer (Spark would otherwise print a Java trace, or retry for minutes): one line naming the setting."""
    remote = conf.get("spark.remote")
    if remote:
        parsed = urlparse(remote.split(";", 1)[0])
        if parsed.scheme != "sc" or not parsed.hostname:
            raise SparkSetupError(f"{settings.SPARK_REMOTE}={remote!r}: not a Spark Connect URL (sc://host:15002)")
        port = parsed.port or 15002
        try:
            socket.create_connection((parsed.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            raise SparkSetupError(
                f"Spark Connect endpoint {parsed.hostname}:{port} ({settings.SPARK_REMOTE}="
                f"{remote.split(';', 1)[0]!r}) is unreachable: {exc.strerror or exc}"
            ) from None
        return
    master = conf.get("spark.master", "")
    if not _MASTER_RE.fullmatch(master):
        raise SparkSetupError(
            f"{settings.SPARK_MASTER}={master!r}: not a Spark master URL "
            "(local[*], local[N], spark://host:7077, yarn, k8s://https://host:port)"
        )


# What the JVM prints on its stderr as it starts, whatever the log4j configuration says: noise for a
# command line and a run log. Only these exact lines are dropped; everything else passes through.
STARTUP_NOISE = (
    "WARNING: Using incubator modules:",
    "Setting default log level to",
    "To adjust logging level use sc.setLogLevel",
)


def _start_quietly(start):
    """Run `start()` (which launches the JVM) with the JVM's stderr piped through a filter that drops
    its start-up noise and forwards every other line to this process's stderr, for the JVM's life."""
    import threading

    try:
        saved, restore = os.dup(2), os.dup(2)
        read_fd, write_fd = os.pipe()
    except OSError:
        return start()

    def forward() -> None:
        with os.fdopen(read_fd, "rb", buffering=0) as pipe, os.fdopen(saved, "wb", buffering=0) as out:
            for line in iter(pipe.readline, b""):
                if not line.decode("utf-8", "replace").startswith(STARTUP_NOISE):
                    out.write(line)

    # reading before the JVM starts, so that a long error at start-up cannot fill the pipe and block it
    threading.Thread(target=forward, name="spark-stderr", daemon=True).start()
    sys.stderr.flush()
    os.dup2(write_fd, 2)  # the JVM inherits the pipe as its stderr
    try:
        return start()
    finally:
        sys.stderr.flush()
        os.dup2(restore, 2)  # this process writes to the real stderr again
        os.close(restore)
        os.close(write_fd)  # the JVM holds the only write end: the filter ends with it


SHARED_SESSION_SECONDS = 3600  # runs share a Connect server session for this long (the server's default
# idle timeout is an hour, so a shared session is never expired while in use)


def shared_session_remote(remote: str, now: float) -> str:
    """`remote` (sc://host:port[/;params]) naming the server session that this deployment's runs share in
    the current period of SHARED_SESSION_SECONDS, unless it names a session itself.

    A server session costs its first query about 0.6 s to set up (measured: an incremental cleaning of
    0.55M rows, warm, 2.5 s in a new session against 1.8-2.0 s in a shared one), and a session per run
    would stay on the server, idle, until its timeout. The id is derived from the endpoint and the
    period, so processes agree on it without talking to each other."""
    import uuid

    base, _, params = remote.partition(";")
    if any(p.strip().startswith("session_id=") for p in params.split(";")):
        return remote
    period = int(now // SHARED_SESSION_SECONDS)
    session = uuid.uuid5(uuid.NAMESPACE_URL, f"compaction-assets:{base.rstrip('/')}:{period}")
    return f"{base.rstrip('/')}/;{params + ';' if params else ''}session_id={session}"


def _session_closed(exc: BaseException) -> bool:
    """Whether Spark Connect refused a session id because that session was released or timed out."""
    return "SESSION_CLOSED" in str(exc)


def get_spark(conf: dict | None = None):
    """Get or create the process's Spark session (the first session's settings win).

    Through Spark Connect the session is the one this deployment's runs share in the current hour
    (`shared_session_remote`), unless SPARK_REMOTE names one, COMPACTION_SHARED_CONNECT_SESSION=0, or
    PySpark releases sessions at exit (SPARK_CONNECT_RELEASE_SESSION_ON_EXIT: one run's exit would end
    the others'); a shared session the server has closed is replaced by one of this run's own."""
    from pyspark.sql import SparkSession

    conf = conf or spark_conf_from_env()
    check_spark_settings(conf)
    setting = (
        f"{settings.SPARK_REMOTE}={conf['spark.remote']!r}"
        if "spark.remote" in conf
        else f"{settings.SPARK_MASTER}={conf.get('spark.master')!r}"
    )
    remote = conf.get("spark.remote")
    conf = {k: v for k, v in conf.items() if k != "spark.remote"}

    def builder_for(url: str | None):
        builder = SparkSession.builder.appName("compaction-assets")
        if url:
            builder = builder.remote(url)
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder

    env = settings.current()
    shared = (
        shared_session_remote(remote, time.time())
        if remote and env.shared_connect_session and not env.connect_release_on_exit
        else remote
    )
    try:
        if remote:  # a Connect client starts no JVM
            try:
                spark = builder_for(shared).getOrCreate()
            except Exception as exc:
                if shared == remote or not _session_closed(exc):
                    raise
                stale = SparkSession.getActiveSession()
                if stale is not None:
                    stale.stop()  # forgets the refused session (its release fails quietly: it is closed)
                spark = builder_for(remote).getOrCreate()
        else:  # a session that exists already needs no filter
            builder = builder_for(None)
            spark = builder.getOrCreate() if SparkSession.getActiveSession() else _start_quietly(builder.getOrCreate)
    except Exception as exc:
        if settings.debug_enabled():
            raise
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        raise SparkSetupError(
            f"Spark did not start ({setting}): {lines[0] if lines else type(exc).__name__} "
            f"(set {settings.DEBUG}=1 for the trace)"
        ) from None
    if remote:
        _bound_connect_retries(spark)
    try:
        spark.sparkContext.setLogLevel("ERROR")
    except Exception:  # Spark Connect has no SparkContext
        pass
    return spark


# How long a Connect client keeps retrying a server that does not answer: about 45 s (backoff 0.05, 0.2,
# 0.8, 3.2 s, then 10 s), enough for a server restart. PySpark's default waits at least 10 minutes for
# every call, so a server that is down held a fleet cleaning (and the process's exit) for 10 minutes a
# query before the engine fault could fail the run and let the scheduler retry it.
CONNECT_RETRY_POLICY = {"max_retries": 8, "backoff_multiplier": 4.0, "initial_backoff": 50, "max_backoff": 10_000}


def _bound_connect_retries(spark) -> None:
    """Replace the Connect client's retry policy by CONNECT_RETRY_POLICY (same errors retried, shorter)."""
    import warnings

    from pyspark.sql.connect.client.retries import DefaultPolicy

    # the failure itself is raised to the caller: PySpark's extra warning is noise on an operator's stderr
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")

    client = getattr(spark, "client", None)
    if client is not None and hasattr(client, "set_retry_policies"):
        client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY_POLICY)])
