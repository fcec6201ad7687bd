"""Structured values landed from a connector are columns of the latest state (SELECT email, not JSON
parsing); the value schema is merged over the files of a log and kept beside its manifest."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from compaction_assets.ingest.formats.canonical import SCHEMA_FILE, read_schema
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.state.latest_state import (
    latest_state_df,
    latest_state_table,
    with_value_columns,
    with_value_columns_df,
    write_latest_state,
)
from compaction_assets.store.fs import Storage
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import write_lines

CFG = build_config({"landing.format": "aiven"})


def land(root, start, rows):
    write_lines(
        root / f"users-0-{start}.jsonl",
        [{"key": k, "value": v, "offset": start + i, "timestamp": 1} for i, (k, v) in enumerate(rows)],
    )


def test_value_fields_are_columns_and_the_schema_evolves(tmp_path, store):
    root = tmp_path / "landing"
    land(root, 0, [("u1", {"email": "a", "age": 1, "key": "k"}), ("u2", {"email": "b", "age": 2, "key": "k"})])
    land(root, 2, [("u2", {"email": "b2", "age": "two", "plan": {"tier": 1}}), ("u3", "plain text")])
    handle = store.log("users-0")
    ingest(handle, CFG, landing_logs(root)[0]["users-0"])
    schema = read_schema(handle.st, handle.path(SCHEMA_FILE)).schema
    assert schema.names == ["age", "email", "key", "plan"] and str(schema.field("age").type) == "string"
    state = with_value_columns(handle, latest_state_table(handle, CFG))
    rows = {r["key"]: r for r in state.to_pylist()}
    assert rows[b"u1"]["email"] == "a" and rows[b"u1"]["age"] == "1" and rows[b"u1"]["value_key"] == "k"
    assert rows[b"u2"]["email"] == "b2" and rows[b"u2"]["age"] == "two" and rows[b"u2"]["plan"] == {"tier": 1}
    assert rows[b"u3"]["email"] is None and rows[b"u3"]["value"] == b"plain text"


def test_the_written_latest_state_is_selectable_by_field(tmp_path, store):
    root = tmp_path / "landing"
    land(root, 0, [("u1", {"email": "a"}), ("u1", {"email": "a2"}), ("u2", {"email": "b"})])
    handle = store.log("users-0")
    ingest(handle, CFG, landing_logs(root)[0]["users-0"])
    st = Storage.open(str(tmp_path / "out"))
    assert write_latest_state(handle, CFG, st, st.root, lambda: None) == 2
    assert pq.read_table(str(tmp_path / "out"), columns=["email"]).column("email").to_pylist() == ["a2", "b"]


def test_spark_latest_state_has_the_same_columns(tmp_path, store, spark):
    root = tmp_path / "landing"
    land(root, 0, [("u1", {"email": "a", "age": 3}), ("u2", {"email": "b", "age": 4}), ("u1", None)])
    handle = store.log("users-0")
    ingest(handle, CFG, landing_logs(root)[0]["users-0"])
    df = with_value_columns_df(handle, latest_state_df(spark, handle, CFG))
    assert [(r["key"], r["email"], r["age"]) for r in df.orderBy("key").collect()] == [(b"u2", "b", 4)]
    arrow = with_value_columns(handle, latest_state_table(handle, CFG))
    assert arrow.select(["email", "age"]).to_pylist() == [{"email": "b", "age": 4}]
    assert json.loads(arrow.column("value")[0].as_py()) == {"age": 4, "email": "b"}


def test_a_field_null_for_a_megabyte_then_a_struct_is_a_struct_column(tmp_path, store):
    """Arrow infers JSON a block at a time and cannot widen a null field to a struct between blocks."""
    root = tmp_path / "landing"
    rows = [(f"u{i}", {"id": i, "plan": None}) for i in range(70_000)] + [("u-last", {"id": 0, "plan": {"tier": 2}})]
    land(root, 0, rows)
    handle = store.log("users-0")
    ingest(handle, CFG, landing_logs(root)[0]["users-0"])
    schema = read_schema(handle.st, handle.path(SCHEMA_FILE)).schema
    assert str(schema.field("plan").type) == "struct<tier: int64>"
    state = {r["key"]: r for r in with_value_columns(handle, latest_state_table(handle, CFG)).to_pylist()}
    assert state[b"u-last"]["plan"] == {"tier": 2} and state[b"u5"]["plan"] is None
