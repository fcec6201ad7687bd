"""Every environment variable the product reads, its default and its parsing, in one place.

Nothing reads the environment at import time: callers ask `current()` when they need a value, so a
Dagster code location loads with nothing set, and a test or a run that changes a variable is seen.
A malformed value is a `ConfigError` naming the variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from compaction_assets.errors import ConfigError

# Where the product keeps and finds its data (the CLI's flags and the Dagster resource default to these).
STORE = "COMPACTION_STORE"
LANDING = "COMPACTION_LANDING"
TOPICS = "COMPACTION_TOPICS"
LATEST_STATE = "COMPACTION_LATEST_STATE"
# Behaviour.
DEBUG = "COMPACTION_DEBUG"
LOCK_TTL_SECONDS = "COMPACTION_LOCK_TTL_SECONDS"
MAX_RUNS_PER_TICK = "COMPACTION_MAX_RUNS_PER_TICK"
ALERT_WEBHOOK_URL = "COMPACTION_ALERT_WEBHOOK_URL"
ALERT_WEBHOOK_TOKEN = "COMPACTION_ALERT_WEBHOOK_TOKEN"
# Batch runs: how many logs due in one tick go into batch runs, and how large one batch may be.
BATCH_MIN_LOGS = "COMPACTION_BATCH_MIN_LOGS"
BATCH_MAX_LOGS = "COMPACTION_BATCH_MAX_LOGS"
BATCH_MAX_BYTES = "COMPACTION_BATCH_MAX_BYTES"
BATCH_SQLITE_SYNC = "COMPACTION_BATCH_SQLITE_SYNC"
# The latest state as an Iceberg table per topic (compaction_assets/table/).
TABLES = "COMPACTION_TABLES"
TABLE_CATALOG_TYPE = "COMPACTION_TABLE_CATALOG_TYPE"
TABLE_CATALOG_URI = "COMPACTION_TABLE_CATALOG_URI"
TABLE_WAREHOUSE = "COMPACTION_TABLE_WAREHOUSE"
TABLE_NAMESPACE = "COMPACTION_TABLE_NAMESPACE"
TABLE_BUCKETS = "COMPACTION_TABLE_BUCKETS"
TABLE_PENDING_BYTES = "COMPACTION_TABLE_PENDING_BYTES"
TABLE_MAX_STATE_BYTES = "COMPACTION_TABLE_MAX_STATE_BYTES"
# Spark (PySpark's own variables).
SPARK_REMOTE = "SPARK_REMOTE"
SPARK_CONNECT_RELEASE_SESSION_ON_EXIT = "SPARK_CONNECT_RELEASE_SESSION_ON_EXIT"
SPARK_MASTER = "SPARK_MASTER"
SPARK_DRIVER_HOST = "SPARK_DRIVER_HOST"
SPARK_DRIVER_BIND_ADDRESS = "SPARK_DRIVER_BIND_ADDRESS"
SPARK_DRIVER_MEMORY = "SPARK_DRIVER_MEMORY"
PYSPARK_PYTHON = "PYSPARK_PYTHON"
JAVA_HOME = "JAVA_HOME"
# The JVM the product starts itself (a local or cluster driver; not a Connect server): C1 only and a
# class-data archive, for commands that live seconds (see compaction_assets/spark/__init__.py).
JVM_QUICK_START = "COMPACTION_JVM_QUICK_START"
JVM_ARCHIVE_DIR = "COMPACTION_JVM_ARCHIVE_DIR"
# Dagster's own.
DAGSTER_HOME = "DAGSTER_HOME"
# Object storage, the AWS SDKs' own names (S3 and S3-compatible servers). GCS and Azure stores take their
# SDKs' standard variables (GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME, ...), which
# their client library reads itself.
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"
AWS_REGION = "AWS_REGION"
AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
AWS_ALLOW_HTTP = "AWS_ALLOW_HTTP"

DEFAULT_STORE = os.path.join("var", "store")
DEFAULT_LANDING = os.path.join("var", "landing")
DEFAULT_TOPICS = "topics.yaml"
DEFAULT_LATEST_STATE = os.path.join("var", "latest_state")
DEFAULT_LOCK_TTL_SECONDS = 300.0
DEFAULT_MAX_RUNS_PER_TICK = 100
DEFAULT_SPARK_MASTER = "local[*]"
# beside the Python environment (the virtualenv that scripts/setup.sh makes), where setup builds it
DEFAULT_JVM_ARCHIVE_DIR = os.path.join(sys.prefix, "var", "compaction-assets")
CLEAN_CONCURRENCY = "COMPACTION_CLEAN_CONCURRENCY"
# Runs reaching one Spark Connect server share a server session (see compaction_assets/spark/__init__.py); 0: each
# run opens its own.
SHARED_CONNECT_SESSION = "COMPACTION_SHARED_CONNECT_SESSION"
DEFAULT_CLEAN_CONCURRENCY = 8  # cleanings of a fleet (`clean --all`) in flight at once in one Spark session
# From 10 due logs a tick they go into batch runs: fewer keep a run each (at most 9 runs of a few seconds).
DEFAULT_BATCH_MIN_LOGS = 10
DEFAULT_BATCH_MAX_LOGS = 250
DEFAULT_BATCH_MAX_BYTES = 2 << 30  # cleanable (or pending) bytes: one huge log does not hold small ones
SQLITE_SYNC_MODES = ("normal", "full")  # PRAGMA synchronous of a batch run's writes to a SQLite instance
DEFAULT_BATCH_SQLITE_SYNC = "normal"  # docs/dagster.md, "Batch runs": why a power loss costs nothing kept
DEFAULT_TABLE_CATALOG_TYPE = "sql"
DEFAULT_TABLE_NAMESPACE = "compaction"
DEFAULT_TABLE_BUCKETS = 1  # key buckets per partition of a topic's table (bench/table.py: 1 beats 16)
DEFAULT_TABLE_PENDING_BYTES = 512 << 20  # a batch's latest states held for its topics' commits (table/group.py)
# a commit builds its log's state in the process at about 4x the visible bytes: a sixteenth of the memory
# keeps that to a quarter of it (24 GiB: 1.5 GiB of visible records)
DEFAULT_TABLE_MAX_STATE_BYTES = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 16


@dataclass(frozen=True)
class TableSettings:
    """Where the topics' Iceberg tables live; None: beside the store (resolved by compaction_assets/table)."""

    enabled: bool = True
    catalog_type: str = DEFAULT_TABLE_CATALOG_TYPE  # any pyiceberg catalog type: sql, rest, glue, hive ...
    catalog_uri: str | None = None  # None: SQLite kept with the store
    warehouse: str | None = None  # None: <store>/_tables/warehouse
    namespace: str = DEFAULT_TABLE_NAMESPACE
    buckets: int = DEFAULT_TABLE_BUCKETS
    pending_bytes: int = DEFAULT_TABLE_PENDING_BYTES  # beyond it, a batch commits its heaviest topic early
    max_state_bytes: int = DEFAULT_TABLE_MAX_STATE_BYTES  # a log past it (visible bytes) is refused, in one line


@dataclass(frozen=True)
class BatchSettings:
    """When sensors ask for batch runs (defs/batch_requests.py) and how many logs and bytes one holds."""

    min_logs: int = DEFAULT_BATCH_MIN_LOGS  # due logs in one tick from which they go into batches
    max_logs: int = DEFAULT_BATCH_MAX_LOGS  # logs in one batch run
    max_bytes: int = DEFAULT_BATCH_MAX_BYTES  # cleanable (or pending) bytes in one batch run
    sqlite_sync: str = DEFAULT_BATCH_SQLITE_SYNC  # one of SQLITE_SYNC_MODES (defs/instance_pool.py)


@dataclass(frozen=True)
class ObjectStoreSettings:
    """S3 client settings; the secret parts never appear in a repr (so never in a log or an error)."""

    endpoint_url: str | None = None  # None: AWS itself
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    region: str | None = None
    allow_http: bool = False  # plain http to the endpoint (a loopback or in-cluster server)


@dataclass(frozen=True)
class Settings:
    """The environment, parsed: every value the product takes from it."""

    store: str
    landing: str
    topics_file: str | None  # None: COMPACTION_TOPICS is not set
    latest_state: str
    debug: bool
    lock_ttl_seconds: float
    max_runs_per_tick: int
    alert_webhook_url: str | None
    alert_webhook_token: str | None
    spark_remote: str | None
    spark_master: str | None  # None: SPARK_MASTER is not set (callers pick their default)
    spark_driver_host: str | None
    spark_driver_bind_address: str | None
    spark_driver_memory: str | None
    dagster_home: str | None
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    clean_concurrency: int = DEFAULT_CLEAN_CONCURRENCY
    java_home: str | None = None
    jvm_quick_start: bool = True
    jvm_archive_dir: str = DEFAULT_JVM_ARCHIVE_DIR
    shared_connect_session: bool = True
    connect_release_on_exit: bool = False  # PySpark releases the server session when the process exits
    tables: TableSettings = field(default_factory=TableSettings)
    batches: BatchSettings = field(default_factory=BatchSettings)


def _text(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value is not None and value.strip() != "" else None


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise ConfigError(f"{name}={raw!r}: must be a positive number of seconds")
    return value


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: must be a positive whole number") from None
    if value < 1:
        raise ConfigError(f"{name}={raw!r}: must be a positive whole number")
    return value


def current(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings as the environment says now (`environ` for tests; defaults where unset)."""
    env = os.environ if environ is None else environ
    return Settings(
        store=_text(env, STORE) or DEFAULT_STORE,
        landing=_text(env, LANDING) or DEFAULT_LANDING,
        topics_file=_text(env, TOPICS),
        latest_state=_text(env, LATEST_STATE) or DEFAULT_LATEST_STATE,
        debug=_flag(env, DEBUG),
        lock_ttl_seconds=_positive_float(env, LOCK_TTL_SECONDS, DEFAULT_LOCK_TTL_SECONDS),
        max_runs_per_tick=_positive_int(env, MAX_RUNS_PER_TICK, DEFAULT_MAX_RUNS_PER_TICK),
        alert_webhook_url=_text(env, ALERT_WEBHOOK_URL),
        alert_webhook_token=_text(env, ALERT_WEBHOOK_TOKEN),
        spark_remote=_text(env, SPARK_REMOTE),
        spark_master=_text(env, SPARK_MASTER),
        spark_driver_host=_text(env, SPARK_DRIVER_HOST),
        spark_driver_bind_address=_text(env, SPARK_DRIVER_BIND_ADDRESS),
        spark_driver_memory=_text(env, SPARK_DRIVER_MEMORY),
        dagster_home=_text(env, DAGSTER_HOME),
        object_store=ObjectStoreSettings(
            endpoint_url=_text(env, AWS_ENDPOINT_URL),
            access_key_id=_text(env, AWS_ACCESS_KEY_ID),
            secret_access_key=_text(env, AWS_SECRET_ACCESS_KEY),
            session_token=_text(env, AWS_SESSION_TOKEN),
            region=_text(env, AWS_REGION) or _text(env, AWS_DEFAULT_REGION),
            allow_http=(_text(env, AWS_ALLOW_HTTP) or "").strip().lower() in ("1", "true", "yes"),
        ),
        clean_concurrency=_positive_int(env, CLEAN_CONCURRENCY, DEFAULT_CLEAN_CONCURRENCY),
        java_home=_text(env, JAVA_HOME),
        jvm_quick_start=_flag(env, JVM_QUICK_START, default=True),
        jvm_archive_dir=_text(env, JVM_ARCHIVE_DIR) or DEFAULT_JVM_ARCHIVE_DIR,
        shared_connect_session=_flag(env, SHARED_CONNECT_SESSION, default=True),
        # PySpark's own parsing of its variable
        connect_release_on_exit=(_text(env, SPARK_CONNECT_RELEASE_SESSION_ON_EXIT) or "").strip().lower()
        in ("true", "1"),
        tables=TableSettings(
            enabled=_flag(env, TABLES, default=True),
            catalog_type=(_text(env, TABLE_CATALOG_TYPE) or DEFAULT_TABLE_CATALOG_TYPE).strip().lower(),
            catalog_uri=_text(env, TABLE_CATALOG_URI),
            warehouse=_text(env, TABLE_WAREHOUSE),
            namespace=(_text(env, TABLE_NAMESPACE) or DEFAULT_TABLE_NAMESPACE).strip(),
            buckets=_positive_int(env, TABLE_BUCKETS, DEFAULT_TABLE_BUCKETS),
            pending_bytes=_positive_int(env, TABLE_PENDING_BYTES, DEFAULT_TABLE_PENDING_BYTES),
            max_state_bytes=_positive_int(env, TABLE_MAX_STATE_BYTES, DEFAULT_TABLE_MAX_STATE_BYTES),
        ),
        batches=BatchSettings(
            min_logs=_positive_int(env, BATCH_MIN_LOGS, DEFAULT_BATCH_MIN_LOGS),
            max_logs=_positive_int(env, BATCH_MAX_LOGS, DEFAULT_BATCH_MAX_LOGS),
            max_bytes=_positive_int(env, BATCH_MAX_BYTES, DEFAULT_BATCH_MAX_BYTES),
            sqlite_sync=_choice(env, BATCH_SQLITE_SYNC, SQLITE_SYNC_MODES, DEFAULT_BATCH_SQLITE_SYNC),
        ),
    )


def _choice(env: Mapping[str, str], name: str, choices: tuple[str, ...], default: str) -> str:
    raw = _text(env, name)
    if raw is None:
        return default
    if raw.strip().lower() not in choices:
        raise ConfigError(f"{name}={raw!r}: must be one of {', '.join(choices)}")
    return raw.strip().lower()


def _flag(env: Mapping[str, str], name: str, default: bool = False) -> bool:
    """A yes/no variable: unset or blank is `default`; 0, false or no means no; anything else yes."""
    raw = _text(env, name)
    return default if raw is None else raw.strip().lower() not in ("0", "false", "no")


def debug_enabled() -> bool:
    """True when COMPACTION_DEBUG asks for full tracebacks (never fails: it guards error reporting)."""
    return _flag(os.environ, DEBUG)


def export_default(name: str, value: str) -> str:
    """Set an environment variable for child processes and libraries unless already set; its value."""
    return os.environ.setdefault(name, value)
