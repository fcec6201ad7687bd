"""Debezium change events landed by a sink: envelopes and flattened rows, deletes as tombstones, and the
source's position promoted into the header strategy's version (KIP-280), so that each row ends at its
latest change by LSN whatever the partition's order."""

from __future__ import annotations

import json

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.debezium import pack_version
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.state.latest_state import latest_state_table, with_value_columns
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import parse_version_fields
from tests.log.connectors.sinks import confluent_name, write_lines

CFG = {
    "landing.format": "confluent",
    "landing.offset.field": "kafka_offset",
    "cdc.format": "debezium",
    "compaction.strategy": "header",
    "compaction.strategy.header": "dbz.version",
    "cdc.version.fields": "source.lsn",
}


def event(op: str, row_id: int, email: str | None, lsn: int, offset: int) -> dict:
    """A PostgreSQL change event as JsonConverter (schemas.enable=false) writes it, with InsertField's offset."""
    row = None if email is None else {"id": row_id, "email": email}
    return {
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": 1_700_000_000_000 + offset,  # the connector's clock: never the order
        "source": {"connector": "postgresql", "db": "app", "table": "users", "lsn": lsn, "txId": 7},
        "kafka_offset": offset,
    }


def land_confluent(root, start: int, events: list[dict]):
    part = root / "users" / "partition=0"
    write_lines(part / confluent_name("users", 0, start, ext="json"), events)
    write_lines(
        part / confluent_name("users", 0, start, ".keys", "json"),
        [{"id": (e["after"] or e["before"])["id"]} for e in events],
    )


def test_partition_order_differs_from_lsn_order_and_each_row_ends_at_its_latest_change(tmp_path, store):
    root = tmp_path / "landing"
    land_confluent(
        root,
        0,
        [
            event("c", 1, "a1@x", 100, 0),
            event("u", 1, "a3@x", 300, 1),
            event("u", 1, "a2@x", 200, 2),  # an older change arrives later
            event("c", 2, "b1@x", 150, 3),
            event("d", 2, "b1@x", 400, 4),
        ],
    )
    write_lines(root / "users" / "tombstone" / confluent_name("users", 0, 5, ".keys", "json"), [{"id": 2}])
    land_confluent(
        root,
        6,
        [
            event("u", 2, "b-stale@x", 350, 6),  # below the delete's LSN: must not revive
            event("r", 3, "c@x", 50, 7),
        ],
    )
    handle = store.log("users-0")
    cfg = build_config(CFG)
    report = ingest(handle, cfg, landing_logs(root)[0]["users-0"])
    assert report.records_appended == 8
    state = with_value_columns(handle, latest_state_table(handle, cfg))
    assert {
        json.loads(k)["id"]: e for k, e in zip(state.column("key").to_pylist(), state.column("email").to_pylist())
    } == {1: "a3@x", 3: "c@x"}
    assert state.column("id").to_pylist() == [1, 3]


def test_flattened_rows_deleted_true_is_a_tombstone_and_lsn_orders(tmp_path, store):
    root = tmp_path / "landing"
    rows = [
        {"key": {"id": 1}, "value": {"id": 1, "email": "new", "__deleted": "false", "__lsn": 20}, "offset": 0},
        {"key": {"id": 1}, "value": {"id": 1, "email": "old", "__deleted": "false", "__lsn": 10}, "offset": 1},
        {"key": {"id": 2}, "value": {"id": 2, "email": "x", "__deleted": "false", "__lsn": 5}, "offset": 2},
        {"key": {"id": 2}, "value": {"id": 2, "email": None, "__deleted": "true", "__lsn": 6}, "offset": 3},
    ]
    write_lines(root / "users-0-0.jsonl", [{**r, "timestamp": 1} for r in rows])
    handle = store.log("users-0")
    cfg = build_config(
        {
            "landing.format": "aiven",
            "cdc.format": "debezium-flat",
            "compaction.strategy": "header",
            "compaction.strategy.header": "v",
            "cdc.version.fields": "__lsn",
        }
    )
    ingest(handle, cfg, landing_logs(root)[0]["users-0"])
    state = with_value_columns(handle, latest_state_table(handle, cfg))
    assert state.column("email").to_pylist() == ["new"] and state.column("__lsn").to_pylist() == [20]


def test_a_truncate_is_refused_naming_the_record(tmp_path, store):
    root = tmp_path / "landing"
    write_lines(
        root / "users-0-0.jsonl",
        [{"key": {"id": 1}, "value": {"op": "t", "source": {"lsn": 1}}, "offset": 0, "timestamp": 1}],
    )
    with pytest.raises(InvalidInputError) as info:
        ingest(
            store.log("users-0"),
            build_config({"landing.format": "aiven", "cdc.format": "debezium"}),
            landing_logs(root)[0]["users-0"],
        )
    assert "users-0-0.jsonl: line 1" in str(info.value) and "skipped.operations=t" in str(info.value)


def test_mysql_positions_pack_in_order_and_a_value_too_wide_is_refused():
    fields = parse_version_fields("source.file,source.pos,source.row")

    def v(file, pos, row):
        return int.from_bytes(
            pack_version({"source": {"file": file, "pos": pos, "row": row}}, fields, "r"), "big", signed=True
        )

    assert v("mysql-bin.000001", 4_000_000_000, 5) < v("mysql-bin.000002", 4, 0) < v("mysql-bin.000002", 4, 1)
    assert v("mysql-bin.000002", 4, 1) < v("mysql-bin.000002", 5, 0)
    with pytest.raises(InvalidInputError, match=r"source.pos=4294967296 does not fit in its 32 bits"):
        v("mysql-bin.000001", 2**32, 0)
    assert pack_version({"after": None}, fields, "r") is None  # Debezium's tombstone: no version
    with pytest.raises(InvalidInputError, match="source.row missing"):
        pack_version({"source": {"file": "f1", "pos": 1}}, fields, "r")
