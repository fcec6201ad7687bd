"""A batch run's connections to its Dagster instance: held open, not one per write (issue 33).

A PostgreSQL instance's storages open a connection (and authenticate) for every write by default
(SQLAlchemy's NullPool): a batch writes ~9 events a log, ~25 connections a log. `optimize_for_webserver`,
the public call the webserver makes at start, rebuilds each storage's engine with a pool that keeps one
connection open; the SQLite storages ignore it (Dagster 1.13). The settings differ from the webserver's:
- `max_overflow=-1`: no limit on connections beyond the held one, as with NullPool today, so a thread
  that writes an event (the op's, its pools' log lines) never waits for a connection nor times out;
  the extra ones close when returned.
- `statement_timeout=0`: no timeout, as a run worker has by default (the webserver's 15 s is for reads).
- `pool_recycle=3600`: a held connection is replaced after an hour, as the webserver does.
"""

import weakref

import dagster as dg

POOL_RECYCLE_S = 3600
UNLIMITED_OVERFLOW = -1   # SQLAlchemy's QueuePool: no bound on connections beyond the pooled one

# The instances already switched in this process: a run's steps share one instance (in-process executor),
# and switching again would leave the first pool's connection open until it is collected.
_POOLED: "weakref.WeakSet[dg.DagsterInstance]" = weakref.WeakSet()


def hold_instance_connections(instance: dg.DagsterInstance) -> None:
    """Make the instance's storages keep a pooled connection for the rest of this process (once per instance)."""
    if instance in _POOLED:
        return
    instance.optimize_for_webserver(statement_timeout=0, pool_recycle=POOL_RECYCLE_S,
                                    max_overflow=UNLIMITED_OVERFLOW)
    _POOLED.add(instance)
