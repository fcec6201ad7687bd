"""The Spark session the engine uses when the caller does not bring one."""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from typing import TypedDict
from urllib.parse import urlparse

from compaction_assets import settings
from compaction_assets.errors import SparkSetupError

# the JVM's options are worked out in jvm_options; these names are the package's too (the warm start,
# scripts/spark-connect.sh and the tests read them from here)
from compaction_assets.spark.jvm_options import class_archive_path as class_archive_path
from compaction_assets.spark.jvm_options import connect_server_java_options as connect_server_java_options
from compaction_assets.spark.jvm_options import driver_java_options
from compaction_assets.spark.lazy_session import LOCAL_MASTER_RE, session_target

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "8",
    # Adaptive execution submits every shuffle stage as a job of its own (bench/jobs.py counts a cleaning's
    # jobs); with 8 shuffle partitions it has little to coalesce.
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
_MASTER_RE = re.compile(LOCAL_MASTER_RE.pattern + r"|local-cluster\[.+\]|yarn|(spark|k8s|mesos)://.+")


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

    A server session's first query pays for setting the session up, and a session per run
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
    conf = conf or spark_conf_from_env()
    check_spark_settings(conf)
    remote = conf.get("spark.remote")
    shared = _shared_remote(remote)
    try:
        spark = _start_session({k: v for k, v in conf.items() if k != "spark.remote"}, remote, shared)
    except Exception as exc:
        if settings.debug_enabled():
            raise
        raise _setup_error(conf, exc) from None
    if remote:
        _bound_connect_retries(spark)
    try:
        spark.sparkContext.setLogLevel("ERROR")
    except Exception:  # Spark Connect has no SparkContext
        pass
    return spark


def _shared_remote(remote: str | None) -> str | None:
    """The Connect URL a session is asked for: the shared session's, unless the settings keep runs apart."""
    env = settings.current()
    if remote and env.shared_connect_session and not env.connect_release_on_exit:
        return shared_session_remote(remote, time.time())
    return remote


def _session_builder(conf: dict, url: str | None):
    """A session builder with the settings `conf`, a Connect client of `url` when given."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("compaction-assets")
    if url:
        builder = builder.remote(url)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder


def _start_session(conf: dict, remote: str | None, shared: str | None):
    """Get or create the session: a Connect client of `shared` (falling back to `remote` when the server
    has closed the shared session), which starts no JVM; else a local or cluster session's JVM."""
    from pyspark.sql import SparkSession

    if not remote:  # a session that exists already needs no filter
        builder = _session_builder(conf, None)
        return builder.getOrCreate() if SparkSession.getActiveSession() else _start_quietly(builder.getOrCreate)
    try:
        return _session_builder(conf, shared).getOrCreate()
    except Exception as exc:
        if shared == remote or not _session_closed(exc):
            raise
    stale = SparkSession.getActiveSession()
    if stale is not None:
        stale.stop()  # forgets the refused session (its release fails quietly: it is closed)
    return _session_builder(conf, remote).getOrCreate()


def _setup_error(conf: dict, exc: BaseException) -> SparkSetupError:
    """The one-line error of a session that did not start, naming the setting that chose it."""
    setting = (
        f"{settings.SPARK_REMOTE}={conf['spark.remote']!r}"
        if "spark.remote" in conf
        else f"{settings.SPARK_MASTER}={conf.get('spark.master')!r}"
    )
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return SparkSetupError(
        f"Spark did not start ({setting}): {lines[0] if lines else type(exc).__name__} "
        f"(set {settings.DEBUG}=1 for the trace)"
    )


# How long a Connect client keeps retrying a server that does not answer: about 45 s (backoff 0.05, 0.2,
# 0.8, 3.2 s, then 10 s), enough for a server restart. PySpark's default waits at least 10 minutes for
# every call, so a server that is down held a fleet cleaning (and the process's exit) for 10 minutes a
# query before the engine fault could fail the run and let the scheduler retry it.
class RetryPolicySettings(TypedDict):
    """The arguments of PySpark's `DefaultPolicy` that the engine sets."""

    max_retries: int
    backoff_multiplier: float
    initial_backoff: int  # ms
    max_backoff: int  # ms


CONNECT_RETRY_POLICY: RetryPolicySettings = {
    "max_retries": 8,
    "backoff_multiplier": 4.0,
    "initial_backoff": 50,
    "max_backoff": 10_000,
}


def _bound_connect_retries(spark) -> None:
    """Replace the Connect client's retry policy by CONNECT_RETRY_POLICY (same errors retried, shorter)."""
    import warnings

    from pyspark.sql.connect.client.retries import DefaultPolicy

    # the failure itself is raised to the caller: PySpark's extra warning is noise on an operator's stderr
    warnings.filterwarnings("ignore", message=r"\[RETRIES_EXCEEDED\]")

    client = getattr(spark, "client", None)
    if client is not None and hasattr(client, "set_retry_policies"):
        client.set_retry_policies([DefaultPolicy(**CONNECT_RETRY_POLICY)])
