"""What one event write costs on Dagster's SQLite instance, and what a held connection and NORMAL sync change.

    .venv/bin/python -m bench.sqlite_events [default|hold|hold-normal] [--events 100]

`default`: the instance as Dagster opens it (a new engine and connection per transaction, NullPool).
`hold`: one sqlite3 connection held open to each shard, after reading it (so it has opened the WAL and
its shared memory: the last connection's close, which checkpoints and deletes the WAL, is then not
Dagster's). `hold-normal`: that and `PRAGMA synchronous=NORMAL` on every connection Dagster opens (no
fsync on commit in WAL mode; a power loss may lose the last commits). Each mode in its own process.
"""

import argparse
import os
import sqlite3
import tempfile
import time

import dagster as dg


def sync_normal_on_connect() -> None:
    """Set synchronous=NORMAL on every SQLite connection SQLAlchemy opens in this process."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _normal(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute("PRAGMA synchronous=NORMAL")


def hold_shards(home: str) -> list[sqlite3.Connection]:
    """One connection to each .db file under `home`, having read its schema (which opens the WAL)."""
    held = []
    for root, _, files in os.walk(home):
        for name in (f for f in files if f.endswith(".db")):
            connection = sqlite3.connect(os.path.join(root, name))
            connection.execute("select count(*) from sqlite_master").fetchall()
            held.append(connection)
    return held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["default", "hold", "hold-normal"])
    ap.add_argument("--events", type=int, default=100)
    args = ap.parse_args()
    if args.mode == "hold-normal":
        sync_normal_on_connect()
    home = tempfile.mkdtemp(prefix="sqlite-events-")
    instance = dg.DagsterInstance.from_config(home)
    for i in range(5):  # the shards and tables exist before the timing
        instance.report_runless_asset_event(dg.AssetMaterialization("warm", metadata={"i": i}))
    held = hold_shards(home) if args.mode != "default" else []
    start = time.perf_counter()
    for i in range(args.events):
        instance.report_runless_asset_event(dg.AssetMaterialization("x", metadata={"i": i, "a": "b" * 100}))
    seconds = (time.perf_counter() - start) / args.events
    print(
        f"{args.mode}: {seconds * 1000:.1f} ms an event ({args.events} events, {len(held)} shards held), "
        f"load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
