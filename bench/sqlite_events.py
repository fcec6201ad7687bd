"""What one event write costs on Dagster's SQLite instance, and what a held connection and NORMAL sync change.

    .venv/bin/python -m bench.sqlite_events [default|hold|hold-normal|hold-normal-reuse] [--events 100] [--checks]

`default`: the instance as Dagster opens it (a new engine and connection per transaction, NullPool).
`hold`: one sqlite3 connection held open to each shard, after reading it (so it has opened the WAL and
its shared memory: the last connection's close, which checkpoints and deletes the WAL, is then not
Dagster's). `hold-normal`: that and `PRAGMA synchronous=NORMAL` on every connection Dagster opens (no
fsync on commit in WAL mode; a power loss may lose the last commits). `hold-normal-reuse`: that and one
engine a shard (defs/batches/instance_pool.py `reuse_engines`). `--checks`: each write also asks
`supports_asset_checks`, as a check's event does. Each mode in its own process; CPU beside the wall time.
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
    ap.add_argument("mode", choices=["default", "hold", "hold-normal", "hold-normal-reuse"])
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument(
        "--checks", action="store_true", help="each write also asks supports_asset_checks, as a check's does"
    )
    args = ap.parse_args()
    if args.mode.startswith("hold-normal"):
        sync_normal_on_connect()
    home = tempfile.mkdtemp(prefix="sqlite-events-")
    instance = dg.DagsterInstance.from_config(home)
    for i in range(5):  # the shards and tables exist before the timing
        instance.report_runless_asset_event(dg.AssetMaterialization("warm", metadata={"i": i}))
    held = hold_shards(home) if args.mode != "default" else []
    if args.mode == "hold-normal-reuse":
        from compaction_assets.defs.batches.instance_pool import reuse_engines

        reuse_engines(instance.event_log_storage)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(args.events):
        instance.report_runless_asset_event(dg.AssetMaterialization("x", metadata={"i": i, "a": "b" * 100}))
        if args.checks:
            assert instance.event_log_storage.supports_asset_checks
    seconds, cpu_seconds = (time.perf_counter() - start) / args.events, (time.process_time() - cpu) / args.events
    print(
        f"{args.mode}: {seconds * 1000:.1f} ms an event, {cpu_seconds * 1000:.1f} ms of CPU ({args.events} events, "
        f"{len(held)} shards held), load {os.getloadavg()[0]:.1f}"
    )


if __name__ == "__main__":
    main()
