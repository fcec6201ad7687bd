"""Every environment variable the product reads, declared once: name, default, parsing and documentation.

Each `NAME = ENVIRONMENT.declare(...)` below is the one declaration of a variable (compaction_assets/variables.py
says what one holds): the constant is the variable's name, a field of `Settings` reads it, and
docs/configuration.md's environment table is generated from the declarations, in their order
(`python -m compaction_assets.settings --docs docs/configuration.md` rewrites it; tests/test_docs.py checks it).
Nothing reads the environment at import time: callers ask `current()` when they need a value, so a Dagster
code location loads with nothing set, and a test or a run that changes a variable is seen. A malformed value
is a `ConfigError` naming the variable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from compaction_assets import redaction
from compaction_assets.variables import (
    Declarations,
    lowercase,
    masked_repr,
    one_of,
    positive_int,
    positive_seconds,
    stripped,
    yes_no,
)

ENVIRONMENT = Declarations()
DEFAULT_SPARK_MASTER = "local[*]"  # callers' default when SPARK_MASTER is unset
SQLITE_SYNC_MODES = ("normal", "full")

# Where the product keeps and finds its data (the CLI's flags and the Dagster resource default to these).
STORE = ENVIRONMENT.declare(
    "COMPACTION_STORE",
    "the log store: a folder or an object-store URI (`s3://bucket/prefix`, `gs://...`, `az://...`). The CLI's "
    "`--store` overrides it",
    default=os.path.join("var", "store"),
)
LANDING = ENVIRONMENT.declare(
    "COMPACTION_LANDING",
    "the landing area (a folder or an object-store URI) that `ingest`, the discovery sensor and `raw_segments` read, "
    "laid out as the topics' `landing.format` says. The CLI's `ingest --landing` overrides it",
    default=os.path.join("var", "landing"),
)
TOPICS = ENVIRONMENT.declare(
    "COMPACTION_TOPICS",
    "the deployment's topics file: stored in the store when its content changes, as `config apply` stores it; "
    "between changes the stored configuration (`config set` included) is what runs, and a file that cannot be "
    "applied is a warning, never a stop ([below](#the-topics-file)). The CLI's `--topics` overrides it",
    shown_as="unset: no file, the stored configuration alone",
)
LATEST_STATE = ENVIRONMENT.declare(
    "COMPACTION_LATEST_STATE",
    "where the Dagster `latest_state` asset writes its tables (a folder or a URI)",
    default=os.path.join("var", "latest_state"),
)
# Behaviour.
DEBUG = ENVIRONMENT.declare(
    "COMPACTION_DEBUG",
    "on: the CLI shows the traceback of an unexpected error, and a Spark session that does not start raises Spark's "
    "own error instead of one line",
    default=False,
    parse=yes_no(),
)
LOCK_TTL_SECONDS = ENVIRONMENT.declare(
    "COMPACTION_LOCK_TTL_SECONDS",
    "the expiry of the cleaning and append leases, in seconds. A live holder renews its lease every third of it; the "
    "lease of a holder that died is taken over once it expires",
    default=300.0,
    parse=positive_seconds,
)
MAX_RUNS_PER_TICK = ENVIRONMENT.declare(
    "COMPACTION_MAX_RUNS_PER_TICK",
    "the most runs a cleaning sensor, `compaction_sweep_schedule` or the freshness checks request in one tick",
    default=100,
    parse=positive_int,
)
# Batch runs: how many logs due in one tick go into batch runs, and how large one batch may be. From 10 due
# logs a tick they go into batch runs: fewer keep a run each (at most 9 runs of a few seconds).
BATCH_MIN_LOGS = ENVIRONMENT.declare(
    "COMPACTION_BATCH_MIN_LOGS",
    "from this many logs due in one sensor or sweep tick, they go into batch runs (`ingest_batch_job`, "
    "`compaction_batch_job`: many partitions in one run, "
    "[dagster.md](dagster.md#batch-runs-fleets-at-the-engines-cost)); fewer keep a run per partition",
    default=10,
    parse=positive_int,
)
BATCH_MAX_LOGS = ENVIRONMENT.declare(
    "COMPACTION_BATCH_MAX_LOGS",
    "the most logs in one batch run",
    default=250,
    parse=positive_int,
)
BATCH_MAX_BYTES = ENVIRONMENT.declare(
    "COMPACTION_BATCH_MAX_BYTES",
    "the most cleanable bytes (an ingestion: pending landing bytes) in one batch run; a log larger than this gets a "
    "batch of its own",
    default=2 << 30,
    parse=positive_int,
    shown_as="`2147483648` (2 GiB)",
)
# PRAGMA synchronous of a batch run's SQLite writes; docs/dagster.md, "Batch runs": why a power loss costs nothing
BATCH_SQLITE_SYNC = ENVIRONMENT.declare(
    "COMPACTION_BATCH_SQLITE_SYNC",
    "`normal` or `full`: how a batch run commits its events to a SQLite instance (`PRAGMA synchronous`; "
    "[dagster.md](dagster.md#batch-runs-fleets-at-the-engines-cost)); no effect on PostgreSQL",
    default="normal",
    parse=one_of(*SQLITE_SYNC_MODES),
)
CLEAN_CONCURRENCY = ENVIRONMENT.declare(
    "COMPACTION_CLEAN_CONCURRENCY",
    "cleanings in flight at once in one Spark session (`clean` of several logs, `clean --all`)",
    default=8,
    parse=positive_int,
)
ALERT_WEBHOOK_URL = ENVIRONMENT.declare(
    "COMPACTION_ALERT_WEBHOOK_URL",
    "the http(s) URL alerts are POSTed to, when the `alert_webhook` resource's `url` is not bound. Unset: alerts go to"
    " the log only",
    secret=True,  # a Slack-style webhook's URL is itself its credential
)
ALERT_WEBHOOK_TOKEN = ENVIRONMENT.declare(
    "COMPACTION_ALERT_WEBHOOK_TOKEN",
    "the bearer token sent with each alert, when the resource's `token` is not bound",
    secret=True,
)
# The JVM the product starts itself (a local or cluster driver; not a Connect server): C1 only and a
# class-data archive, for commands that live seconds (see compaction_assets/spark/__init__.py).
JVM_QUICK_START = ENVIRONMENT.declare(
    "COMPACTION_JVM_QUICK_START",
    "the JVM the product starts itself (a local or cluster driver) runs the fast compiler only and maps the class-data"
    " archive; `scripts/spark-connect.sh` gives its server the fast compiler only. Off: a plain JVM",
    default=True,
    parse=yes_no(),
)
# beside the Python environment (the virtualenv that scripts/setup.sh makes), where setup builds it
JVM_ARCHIVE_DIR = ENVIRONMENT.declare(
    "COMPACTION_JVM_ARCHIVE_DIR",
    "where `python -m compaction_assets.warm_start.jvm_archive` (run by `scripts/setup.sh`) writes the class-data "
    "archive and where a session looks for it",
    default=os.path.join(sys.prefix, "var", "compaction-assets"),
    shown_as="`var/compaction-assets` under the Python environment's prefix (`.venv/var/compaction-assets`)",
)
# Runs reaching one Spark Connect server share a server session (see compaction_assets/spark/__init__.py).
SHARED_CONNECT_SESSION = ENVIRONMENT.declare(
    "COMPACTION_SHARED_CONNECT_SESSION",
    "runs that reach one Spark Connect server share a server session per hour. Off: each run opens its own",
    default=True,
    parse=yes_no(),
)
# The latest state as an Iceberg table per topic (compaction_assets/table/).
TABLES = ENVIRONMENT.declare(
    "COMPACTION_TABLES",
    "every change of a log is committed to its topic's Iceberg table by what made it: `append`, `ingest`, `clean`, "
    "`roll`, `set-log-start` and the Dagster ingest and cleaning runs ([table.md](table.md)). Off (e.g. for a bulk "
    "load): the tables are left behind, and the next commit of a log catches up; Dagster writes Parquet folders only",
    default=True,
    parse=yes_no(),
)
TABLE_CATALOG_TYPE = ENVIRONMENT.declare(
    "COMPACTION_TABLE_CATALOG_TYPE",
    "the pyiceberg catalog type of the topics' tables (`sql`, `rest`, `glue`, `hive`, ...); other catalog properties "
    "(a REST catalog's credential, ...) come from pyiceberg's own `PYICEBERG_CATALOG__COMPACTION__*` variables",
    default="sql",
    parse=lowercase,
)
TABLE_CATALOG_URI = ENVIRONMENT.declare(
    "COMPACTION_TABLE_CATALOG_URI",
    "the catalog's URI (`postgresql+psycopg2://...` for a shared SQL catalog, `https://...` for a REST catalog)",
    shown_as="SQLite kept with the store: `<store>/_tables/catalog.db` (a store on an object store: a local "
    "`var/tables/<endpoint and store>/catalog.db`)",
)
TABLE_WAREHOUSE = ENVIRONMENT.declare(
    "COMPACTION_TABLE_WAREHOUSE",
    "where new tables' files are written; S3 through the store's own `AWS_*` settings",
    shown_as="`<store>/_tables/warehouse` (beside the logs, in the store's bucket on S3)",
)
TABLE_NAMESPACE = ENVIRONMENT.declare(
    "COMPACTION_TABLE_NAMESPACE",
    "the namespace of the tables: topic `orders.eu` is table `compaction.orders_eu`",
    default="compaction",
    parse=stripped,
)
# key buckets per partition of a topic's table (a random change touches them all)
TABLE_BUCKETS = ENVIRONMENT.declare(
    "COMPACTION_TABLE_BUCKETS",
    "key buckets of a new table per partition: a commit writes a data file per bucket its keys fall in, and a rewrite "
    "of masked rows rewrites the due buckets only ([table.md](table.md))",
    default=1,
    parse=positive_int,
)
TABLE_PENDING_BYTES = ENVIRONMENT.declare(
    "COMPACTION_TABLE_PENDING_BYTES",
    "the latest states a batch run holds for its topics' commits (one snapshot per topic after the batch's cleanings);"
    " beyond it, the topic holding the most is committed at once, as a group of its own ([table.md](table.md))",
    default=512 << 20,
    parse=positive_int,
    shown_as="`536870912` (512 MiB)",
)
TABLE_MAX_STATE_BYTES = ENVIRONMENT.declare(
    "COMPACTION_TABLE_MAX_STATE_BYTES",
    "the visible bytes of a log up to which a table commit builds its state in the process (about four times that in "
    "memory); a larger log's change is found and written by Spark tasks, committed in the same snapshot "
    "([table.md](table.md#costs-and-limits))",
    parse=positive_int,
    shown_as="a quarter of `COMPACTION_MEMORY_BUDGET` (1.5 GiB on 24 GiB)",
)
MEMORY_BUDGET = ENVIRONMENT.declare(
    "COMPACTION_MEMORY_BUDGET",
    "the memory the product's process may take for the work it does itself (a cleaning's decision and write, a latest "
    "state, a table commit, an ingestion's backlog): past the bounds it sets, work goes to Spark tasks (`describe`)",
    parse=positive_int,
    shown_as="a quarter of the machine's memory, or of its container's limit (6 GiB on 24 GiB)",
)
# Spark (PySpark's own variables).
SPARK_REMOTE = ENVIRONMENT.declare(
    "SPARK_REMOTE",
    "a Spark Connect endpoint, `sc://host:15002` (with parameters such as `sc://host:443/;use_ssl=true;token=...`). "
    "When set, it is used instead of `SPARK_MASTER`. A server on this machine's loopback (`127.0.0.1`, `::1`, "
    "`localhost`) that answers is taken to run its tasks on this machine's cores, so a cleaning that Spark would run "
    "on them anyway runs in this process and opens no session. A loopback address that forwards to a server elsewhere "
    "(an SSH tunnel) gets the same treatment: those cleanings still give the same log, on this machine's cores",
)
SPARK_MASTER = ENVIRONMENT.declare(
    "SPARK_MASTER",
    "the Spark master of the session the product starts: `local[N]`, `spark://host:7077`, `yarn`, "
    "`k8s://https://host:port`",
    shown_as="`local[*]`",
)
SPARK_DRIVER_HOST = ENVIRONMENT.declare(
    "SPARK_DRIVER_HOST",
    "the address executors use to reach the driver",
    shown_as="`127.0.0.1` for a local master; Spark's own otherwise",
)
SPARK_DRIVER_BIND_ADDRESS = ENVIRONMENT.declare(
    "SPARK_DRIVER_BIND_ADDRESS",
    "the address the driver binds to",
    shown_as="`127.0.0.1` for a local master; Spark's own otherwise",
)
SPARK_DRIVER_MEMORY = ENVIRONMENT.declare(
    "SPARK_DRIVER_MEMORY",
    "the driver's memory (`2g`) of a local or cluster session; `scripts/spark-connect.sh` gives it to its server. Not "
    "used through Spark Connect",
    shown_as="Spark's own",
)
# PySpark's own parsing of its variable (PySpark reads it too)
SPARK_CONNECT_RELEASE_SESSION_ON_EXIT = ENVIRONMENT.declare(
    "SPARK_CONNECT_RELEASE_SESSION_ON_EXIT",
    "PySpark's own: a client releases its server session when it exits. When `true` (or `1`), runs do not share a "
    "session",
    default=False,
    parse=yes_no(("true", "1")),
    shown_as="`false`",
)
PYSPARK_PYTHON = ENVIRONMENT.declare(
    "PYSPARK_PYTHON",
    "the interpreter of Spark's Python workers. Under a local master, or one on `127.0.0.1` or `localhost`, it is set "
    "to the running interpreter when unset. On a cluster, set it to the executors' interpreter",
    shown_as="this interpreter, under a local master",
)
JAVA_HOME = ENVIRONMENT.declare(
    "JAVA_HOME",
    "the Java that PySpark starts; the class-data archive is named after that Java binary",
    shown_as="the `java` on the `PATH`",
)
# Dagster's own.
DAGSTER_HOME = ENVIRONMENT.declare(
    "DAGSTER_HOME",
    "Dagster's instance folder (Dagster reads it itself). The demo sets it to `var/dagster_home` under the current "
    "directory when it is unset; `scripts/demo.sh` and `scripts/ui.sh` set it to the repository's `var/dagster_home`",
)
# Object storage, the AWS SDKs' own names (S3 and S3-compatible servers). GCS and Azure stores take their
# SDKs' standard variables (GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT_NAME, ...), which
# their client library reads itself.
AWS_ACCESS_KEY_ID = ENVIRONMENT.declare(
    "AWS_ACCESS_KEY_ID",
    "S3 access key (unset: the workers' own environment or instance credentials)",
    secret=True,
)
AWS_SECRET_ACCESS_KEY = ENVIRONMENT.declare("AWS_SECRET_ACCESS_KEY", "S3 secret key", secret=True)
AWS_SESSION_TOKEN = ENVIRONMENT.declare("AWS_SESSION_TOKEN", "S3 session token, for temporary credentials", secret=True)
AWS_REGION = ENVIRONMENT.declare("AWS_REGION", "S3 region")
AWS_DEFAULT_REGION = ENVIRONMENT.declare("AWS_DEFAULT_REGION", "S3 region, when `AWS_REGION` is unset")
AWS_ENDPOINT_URL = ENVIRONMENT.declare(
    "AWS_ENDPOINT_URL",
    "an S3-compatible server, `http://host:port` (MinIO, R2, SeaweedFS)",
    shown_as="unset (AWS itself)",
)
AWS_ALLOW_HTTP = ENVIRONMENT.declare(
    "AWS_ALLOW_HTTP",
    "`true`, `1` or `yes`: plain http to the endpoint",
    default=False,
    parse=yes_no(("1", "true", "yes")),
    shown_as="`false`",
)


@dataclass(frozen=True, repr=False)
class TableSettings:
    """Where the topics' Iceberg tables live; None: beside the store (resolved by compaction_assets/table)."""

    enabled: bool = ENVIRONMENT.field(TABLES)
    catalog_type: str = ENVIRONMENT.field(TABLE_CATALOG_TYPE)  # any pyiceberg catalog type: sql, rest, glue ...
    catalog_uri: str | None = ENVIRONMENT.field(TABLE_CATALOG_URI)  # None: SQLite kept with the store
    warehouse: str | None = ENVIRONMENT.field(TABLE_WAREHOUSE)  # None: <store>/_tables/warehouse
    namespace: str = ENVIRONMENT.field(TABLE_NAMESPACE)
    buckets: int = ENVIRONMENT.field(TABLE_BUCKETS)
    pending_bytes: int = ENVIRONMENT.field(TABLE_PENDING_BYTES)  # beyond it, a batch commits its heaviest topic
    max_state_bytes: int | None = ENVIRONMENT.field(TABLE_MAX_STATE_BYTES)  # None: a quarter of the budget
    __repr__ = masked_repr  # no secret, not even inside a URI


@dataclass(frozen=True, repr=False)
class BatchSettings:
    """When sensors ask for batch runs (defs/batches/requests.py) and how many logs and bytes one holds."""

    min_logs: int = ENVIRONMENT.field(BATCH_MIN_LOGS)  # due logs in one tick from which they go into batches
    max_logs: int = ENVIRONMENT.field(BATCH_MAX_LOGS)  # logs in one batch run
    max_bytes: int = ENVIRONMENT.field(BATCH_MAX_BYTES)  # cleanable (or pending) bytes in one batch run
    sqlite_sync: str = ENVIRONMENT.field(BATCH_SQLITE_SYNC)  # one of SQLITE_SYNC_MODES (defs/batches/instance_pool.py)
    __repr__ = masked_repr  # no secret, not even inside a URI


@dataclass(frozen=True, repr=False)
class ObjectStoreSettings:
    """S3 client settings; the secret parts never appear in a repr (so never in a log or an error)."""

    endpoint_url: str | None = ENVIRONMENT.field(AWS_ENDPOINT_URL)  # None: AWS itself
    access_key_id: str | None = ENVIRONMENT.field(AWS_ACCESS_KEY_ID)
    secret_access_key: str | None = ENVIRONMENT.field(AWS_SECRET_ACCESS_KEY)
    session_token: str | None = ENVIRONMENT.field(AWS_SESSION_TOKEN)
    region: str | None = ENVIRONMENT.field(AWS_REGION, fallback=AWS_DEFAULT_REGION)
    allow_http: bool = ENVIRONMENT.field(AWS_ALLOW_HTTP)  # plain http to the endpoint (a loopback or in-cluster server)
    __repr__ = masked_repr  # no secret, not even inside a URI


@dataclass(frozen=True, repr=False)
class Settings:
    """The environment, parsed: every value the product takes from it."""

    store: str = ENVIRONMENT.field(STORE)
    landing: str = ENVIRONMENT.field(LANDING)
    topics_file: str | None = ENVIRONMENT.field(TOPICS)
    latest_state: str = ENVIRONMENT.field(LATEST_STATE)
    debug: bool = ENVIRONMENT.field(DEBUG)
    lock_ttl_seconds: float = ENVIRONMENT.field(LOCK_TTL_SECONDS)
    max_runs_per_tick: int = ENVIRONMENT.field(MAX_RUNS_PER_TICK)
    alert_webhook_url: str | None = ENVIRONMENT.field(ALERT_WEBHOOK_URL)
    alert_webhook_token: str | None = ENVIRONMENT.field(ALERT_WEBHOOK_TOKEN)
    spark_remote: str | None = ENVIRONMENT.field(SPARK_REMOTE)
    spark_master: str | None = ENVIRONMENT.field(SPARK_MASTER)  # None: unset (callers pick their default)
    spark_driver_host: str | None = ENVIRONMENT.field(SPARK_DRIVER_HOST)
    spark_driver_bind_address: str | None = ENVIRONMENT.field(SPARK_DRIVER_BIND_ADDRESS)
    spark_driver_memory: str | None = ENVIRONMENT.field(SPARK_DRIVER_MEMORY)
    dagster_home: str | None = ENVIRONMENT.field(DAGSTER_HOME)
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    clean_concurrency: int = ENVIRONMENT.field(CLEAN_CONCURRENCY)  # cleanings of a fleet in flight at once
    memory_budget: int | None = ENVIRONMENT.field(MEMORY_BUDGET)  # None: cleaning/decide/placement.py's default
    java_home: str | None = ENVIRONMENT.field(JAVA_HOME)
    jvm_quick_start: bool = ENVIRONMENT.field(JVM_QUICK_START)
    jvm_archive_dir: str = ENVIRONMENT.field(JVM_ARCHIVE_DIR)
    shared_connect_session: bool = ENVIRONMENT.field(SHARED_CONNECT_SESSION)
    connect_release_on_exit: bool = ENVIRONMENT.field(SPARK_CONNECT_RELEASE_SESSION_ON_EXIT)
    tables: TableSettings = field(default_factory=TableSettings)
    batches: BatchSettings = field(default_factory=BatchSettings)
    __repr__ = masked_repr  # no secret, not even inside a URI


# every message of the product masks the environment's secrets (redaction.secrets_in says which): read here only
redaction.add_source(lambda: redaction.secrets_in(os.environ, ENVIRONMENT.secret_names()))


def current(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings as the environment says now (`environ` for tests; defaults where unset)."""
    values = ENVIRONMENT.read(Settings, os.environ if environ is None else environ)
    groups = {"object_store": ObjectStoreSettings, "tables": TableSettings, "batches": BatchSettings}
    return Settings(**{name: groups[name](**value) if name in groups else value for name, value in values.items()})


def debug_enabled() -> bool:
    """True when COMPACTION_DEBUG asks for full tracebacks (never fails: it guards error reporting)."""
    return bool(ENVIRONMENT.value(os.environ, DEBUG))


def store_location() -> str:
    """COMPACTION_STORE, or its default, read alone: a shell completion lists the store's logs even when
    another variable is malformed (a command would refuse it, a completion stays quiet)."""
    return str(ENVIRONMENT.value(os.environ, STORE))


def export_default(name: str, value: str) -> str:
    """Set an environment variable for child processes and libraries unless already set; its value."""
    return os.environ.setdefault(name, value)


if __name__ == "__main__":
    sys.exit(ENVIRONMENT.docs_command(sys.argv[1:]))
