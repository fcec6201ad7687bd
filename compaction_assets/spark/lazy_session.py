"""A Spark session started on its first use, so that work whose paths run no Spark job starts none.

A cleaning decided and written in this process (the offset strategy under a local master) runs no Spark job,
yet opening its session cost, per process: cold, a driver JVM's start; warm, Spark Connect's client modules
and session, each a large share of such a cleaning. A `LazySession` stands where the session is handed down
and opens it when an attribute of the session is first read; what the paths ask before that (the master they
run on, and a local master's cores) the settings answer, here (`session_target`, `master_named_by`,
`local_master_cores`), so that a cleaning that needs no Spark job enters no more of spark/ than this module.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlparse

from compaction_assets import settings
from compaction_assets.errors import EngineError

# The master a Spark Connect server on this machine's loopback is taken to run: its tasks share this
# machine's cores with the client (scripts/spark-connect.sh starts it so, with local[*] by default).
LOOPBACK_CONNECT_MASTER = "local[*]"
ANSWER_TIMEOUT_S = 1.0
# spark.driver.maxResultSize as Spark writes sizes (512m, 2g, 1024k, a bare number of bytes)
_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", re.IGNORECASE)
LOCAL_MASTER_RE = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[0-9]+)?\])?")


def session_target() -> dict:
    """Where the settings send a session: {spark.remote} or {spark.master} (no JVM options worked out)."""
    env = settings.current()
    if env.spark_remote:
        return {"spark.remote": env.spark_remote}
    return {"spark.master": env.spark_master or settings.DEFAULT_SPARK_MASTER}


def master_named_by(conf: dict) -> str | None:
    """The master a session started from `conf` runs its tasks on, where the settings tell it: the master
    itself, or a Connect server that answers on this machine's loopback (None: only the session knows; a
    server elsewhere, or one that does not answer, whose session then fails as the engine's fault)."""
    remote = conf.get("spark.remote")
    if not remote:
        return conf.get("spark.master")
    url = urlparse(remote.split(";", 1)[0])
    host = url.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name
        return None
    if not loopback:
        return None
    try:
        socket.create_connection((host, url.port or 15002), timeout=ANSWER_TIMEOUT_S).close()
    except OSError:
        return None
    return LOOPBACK_CONNECT_MASTER


def local_master_cores(master: str) -> int | None:
    """The cores a local master (local, local[N], local[*], local[N,F]) runs tasks on, capped by this
    machine's; None for any other master."""
    match = LOCAL_MASTER_RE.fullmatch(master.strip())
    if match is None:
        return None
    cores = os.cpu_count() or 1
    wanted = match.group(2)
    if wanted is None:
        return 1
    return cores if wanted == "*" else min(int(wanted), cores)


class LazySession:
    """Stands for the Spark session `start()` returns, started (once, thread-safe) on first attribute read."""

    def __init__(self, start: Callable[[], object], master: str | None = None):
        self._start = start
        self._master = master
        self._session: object | None = None
        self._failed: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def started(self) -> bool:
        """Whether the session has been started."""
        return self._session is not None

    @property
    def known_master(self) -> str | None:
        """The master the settings name for this session (without starting it), or the session's own."""
        if self._session is None and self._master is not None:
            return self._master
        return self.session().conf.get("spark.master")

    def session(self):
        """The session, started now if it was not."""
        with self._lock:
            if self._failed is not None:  # tried once: a session that cannot start is not retried per use
                raise self._failed
            if self._session is None:
                try:
                    self._session = self._start()
                except BaseException as exc:
                    self._failed = exc
                    raise
            return self._session

    def __getattr__(self, name: str):
        if name.startswith("_"):  # this object's own state, asked before __init__ set it (a copy, a pickle)
            raise AttributeError(name)
        return getattr(self.session(), name)


def local_cores(spark) -> int | None:
    """The cores a local master runs tasks on (capped by this machine's), None for a cluster's master.

    Through Spark Connect the server's master is asked; a local server's tasks share a machine with its
    clients (scripts/spark-connect.sh starts one on 127.0.0.1)."""
    try:
        master = (spark.known_master if isinstance(spark, LazySession) else spark.conf.get("spark.master")) or ""
    except Exception:  # a session that does not show its master: treat it as a cluster
        return None
    return local_master_cores(master)


def result_limit(spark) -> float:
    """spark.driver.maxResultSize in bytes (1 GiB when the session does not say; 0 is unlimited)."""
    try:
        text = spark.conf.get("spark.driver.maxResultSize", "1g") or "1g"
    except Exception:  # a session that does not show its conf: Spark's default
        text = "1g"
    match = _SIZE.fullmatch(text)
    if match is None:
        return float(1 << 30)
    size = int(match.group(1)) * 1024 ** "bkmgtp".index((match.group(2) or "b").lower())
    return float("inf") if size == 0 else float(size)


def settings_session(start: Callable[[], object]) -> LazySession:
    """A LazySession of the session the settings name, `start()` starting it; its master known from them."""
    return LazySession(start, master_named_by(session_target()))


def started_session(spark) -> object | None:
    """`spark` if it is a started session (a LazySession not yet started: None)."""
    if isinstance(spark, LazySession):
        return spark.session() if spark.started else None
    return spark


def session_of(spark):
    """`spark` (a session, a function returning one, or None for the process's default session) as a session."""
    if spark is None:
        from compaction_assets.spark import get_spark

        return get_spark()
    return spark() if callable(spark) else spark


def cleaning_session(spark, log: str):
    """A cleaning's session (`spark` as `session_of` takes it), started only when one of its paths needs
    Spark; a session that cannot start is the engine's fault, which never marks the log."""
    if spark is not None and not callable(spark):
        return spark

    def start():
        try:
            return session_of(spark)
        except EngineError as exc:
            raise EngineError(f"log {log!r} not cleaned and not marked: {exc}") from exc

    return settings_session(start)
