"""A batch run's connections to its Dagster instance: held open, not one per write.

A PostgreSQL instance's storages open a connection (and authenticate) for every write by default
(SQLAlchemy's NullPool): a batch writes ~9 events a log, ~25 connections a log. `optimize_for_webserver`,
the public call the webserver makes at start, rebuilds each storage's engine with a pool that keeps one
connection open; the SQLite storages ignore it (Dagster 1.13). The settings differ from the webserver's:
- `max_overflow=-1`: no limit on connections beyond the held one, as with NullPool today, so a thread
  that writes an event (the op's, its pools' log lines) never waits for a connection nor times out;
  the extra ones close when returned.
- `statement_timeout=0`: no timeout, as a run worker has by default (the webserver's 15 s is for reads).
- `pool_recycle=3600`: a held connection is replaced after an hour, as the webserver does.

A SQLite instance's event storage also closes its last connection to a shard after every transaction,
and SQLite then checkpoints and deletes the shard's WAL, to create it again at the next write (four
fsyncs a transaction). A connection of ours held open to the run's shard and the index (idle: no
transaction, so checkpoints still run) keeps the WAL in place.

Each commit of a SQLite instance also waits for an fsync of the WAL (synchronous FULL, SQLite's default):
a batch run's ~9 events a log then each wait for the disk (with synchronous NORMAL they do not;
`bench/sqlite_events.py` times both), and two batches' events serialise on the one index. A batch run sets
NORMAL on the connections Dagster opens to the instance's files (COMPACTION_BATCH_SQLITE_SYNC, `normal` by
default; `full` keeps SQLite's default). In WAL mode NORMAL never corrupts the database; a power loss may
lose the last commits, which the loss of power does to the run anyway: the run dies mid-batch, and
re-executing it records whatever history the instance lacks for what the store committed (`defs/batches/jobs.py`,
triage), as after a kill. The store's own commits (the manifests) do not depend on it.
"""

import os
import sqlite3
import weakref
from contextlib import contextmanager

import dagster as dg

from compaction_assets import settings

POOL_RECYCLE_S = 3600
UNLIMITED_OVERFLOW = -1  # SQLAlchemy's QueuePool: no bound on connections beyond the pooled one

# The instances already switched in this process: a run's steps share one instance (in-process executor),
# and switching again would leave the first pool's connection open until it is collected.
_POOLED: "weakref.WeakSet[dg.DagsterInstance]" = weakref.WeakSet()
# The SQLite shards held open per instance, by path: closed when the instance is collected.
_HELD: "weakref.WeakKeyDictionary[dg.DagsterInstance, dict]" = weakref.WeakKeyDictionary()
INDEX_SHARD = "index"  # the name Dagster's SQLite event storage gives its index shard
SQLITE_BUSY_TIMEOUT_SECONDS = 30  # Dagster's own for its SQLite connections (dagster._core.storage.sqlite)
# The SQLite event storages whose engines this process reuses (reuse_engines: once a storage).
_REUSING: "weakref.WeakSet[object]" = weakref.WeakSet()


def hold_instance_connections(instance: dg.DagsterInstance, run_id: str) -> None:
    """Keep the instance's storages' connections open for the rest of this process (once per instance)."""
    if instance not in _POOLED:
        instance.optimize_for_webserver(
            statement_timeout=0, pool_recycle=POOL_RECYCLE_S, max_overflow=UNLIMITED_OVERFLOW
        )
        _POOLED.add(instance)
    path_for_shard = getattr(instance.event_log_storage, "path_for_shard", None)  # SQLite's sharded storage
    if path_for_shard is None:
        return
    if settings.current().batches.sqlite_sync == "normal":
        sync_normal_under(instance.root_directory)
    reuse_engines(instance.event_log_storage)
    held = _HELD.setdefault(instance, {})
    for path in (path_for_shard(INDEX_SHARD), path_for_shard(run_id)):
        if path not in held and os.path.exists(path):
            connection = sqlite3.connect(path, check_same_thread=False)
            # reading the schema opens the WAL and its shared memory: this connection now counts
            connection.execute("select count(*) from sqlite_master").fetchall()
            held[path] = connection


def held_shards(instance: dg.DagsterInstance) -> list[str]:
    """The SQLite shards of the instance this process holds open."""
    return sorted(_HELD.get(instance, {}))


_NORMAL_ROOTS: set[str] = set()  # the instance folders whose SQLite files this process writes with NORMAL


def sync_normal_under(root: str) -> None:
    """Every SQLite connection SQLAlchemy opens from now on in this process to a file under `root` (the
    instance's folder; not, e.g., a table catalog's database elsewhere) commits with synchronous NORMAL."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if not _NORMAL_ROOTS:
        event.listen(Engine, "connect", _normal_if_under_roots)
    _NORMAL_ROOTS.add(os.path.realpath(root) + os.sep)


def _normal_if_under_roots(dbapi_connection, _record) -> None:
    if not isinstance(dbapi_connection, sqlite3.Connection):
        return
    files = [row[2] for row in dbapi_connection.execute("PRAGMA database_list") if row[2]]
    if any(os.path.realpath(f).startswith(root) for f in files for root in _NORMAL_ROOTS):
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def reuse_engines(storage) -> None:
    """Dagster's SQLite event storage builds a SQLAlchemy engine for every transaction (about 25 a log in a
    batch, with `create_engine`'s dialect set-up each time) and another, with a connection and a schema
    inspection, for every `has_table` (`supports_asset_checks`, asked at each check's event): the largest
    of the batch's own costs in Dagster after the writes themselves (docs/performance.md). Here each shard's
    engine is built once, after Dagster's own first transaction on it (which creates and migrates the
    shard), and used as Dagster uses it: a new connection (NullPool) and one transaction, under the
    storage's lock; a table found is not looked for again (tables are not dropped under a run)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import Engine
    from sqlalchemy.pool import NullPool

    if storage in _REUSING or not hasattr(storage, "_connect") or not hasattr(storage, "conn_string_for_shard"):
        return
    _REUSING.add(storage)
    dagster_connect, dagster_has_table = storage._connect, storage.has_table
    engines: dict[str, Engine] = {}
    found: set[str] = set()

    @contextmanager
    def connect(shard: str):
        engine = engines.get(shard)
        if engine is None:
            with dagster_connect(shard):  # Dagster's own first transaction: the shard created and migrated
                pass
            engine = engines.setdefault(
                shard,
                create_engine(
                    storage.conn_string_for_shard(shard),
                    poolclass=NullPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
                ),
            )
        with storage._db_lock, engine.connect() as connection, connection.begin():
            yield connection

    def has_table(name: str) -> bool:
        if name not in found and dagster_has_table(name):
            found.add(name)
        return name in found

    storage._connect, storage.has_table = connect, has_table
