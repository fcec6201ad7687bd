"""Helpers of the table tests: logs written through the log layer, tables read back through pyiceberg."""

from __future__ import annotations

import json

from compaction_assets.log import writer
from compaction_assets.state.latest_state import latest_state_table
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import locate, open_catalog
from compaction_assets.table.reading.read import open_table, scan
from compaction_assets.topics.config import build_config

CFG = build_config({})
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}  # a Dagster run's console logs


def land(root, name, records):
    """Land a JSON Lines file of `records` in partition 0 of topic `users` under the landing `root`."""
    folder = root / "users" / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def put(handle, rows: dict, ts: int = 1, config=CFG) -> None:
    """Append {key: value-or-None} to the log (None is a tombstone)."""
    writer.append(handle, config, [{"key": k, "value": v, "timestamp": ts} for k, v in rows.items()])


def table_state(handle, snapshot_id=None) -> dict:
    """{key: (value, offset)} of the log's partition in its topic's table."""
    topic, partition = parse_log_name(handle.name)
    table, _ = open_table(handle.st, topic)
    rows = scan(table, snapshot_id, partition).to_pylist()
    return {r["key"]: (r["value"], r["offset"]) for r in rows}


def log_state(handle, config=CFG) -> dict:
    """{key: (value, offset)} of the log's latest state."""
    return {r["key"]: (r["value"], r["offset"]) for r in latest_state_table(handle, config).to_pylist()}


def data_files(handle) -> set[str]:
    """The data files of the current snapshot of the log's topic's table."""
    topic, _ = parse_log_name(handle.name)
    table, _ = open_table(handle.st, topic)
    return set(table.inspect.files().column("file_path").to_pylist())


def catalog_of(handle):
    """The pyiceberg catalog of the handle's store."""
    return open_catalog(locate(handle.st))
