"""The landing area and the store on the S3 server (SeaweedFS): each connector's layout (Confluent with a
tombstone/ folder, Aiven's flat names, Lenses' envelopes, Debezium events out of LSN order) is discovered,
ingested through the object store at most once, and read back. In the real-system suite (`ci_real`: under
CI=true a server that cannot start fails them); elsewhere they skip, saying why, without one."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from compaction_assets.ingest.landing import ingest, landing_logs, pending_files
from compaction_assets.log.reader import iter_records
from compaction_assets.state.latest_state import latest_state_table, with_value_columns
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import b64, confluent_name, write_avro, write_parquet

pytestmark = pytest.mark.ci_real


def lines(objs) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objs).encode()


def test_confluent_layout_on_s3(s3_store_uri):
    landing_uri = s3_store_uri.rsplit("/", 1)[0] + "/topics"
    land = Storage.open(landing_uri)
    part = land.join("users", "partition=0")
    land.write_atomic(
        f"{part}/{confluent_name('users', 0, 0, ext='json')}",
        lines([{"id": 1, "email": "a", "o": 0}, {"id": 2, "email": "b", "o": 2}]),
    )
    land.write_atomic(f"{part}/{confluent_name('users', 0, 0, '.keys', 'json')}", lines([{"id": 1}, {"id": 2}]))
    land.write_atomic(
        land.join("users", "tombstone", confluent_name("users", 0, 1, ".keys", "json")), lines([{"id": 1}])
    )
    found, refused = landing_logs(landing_uri)
    assert list(found) == ["users-0"] and refused == []
    assert str(found["users-0"]).startswith("s3://")
    handle = LogStore(s3_store_uri).log("users-0")
    cfg = build_config({"landing.format": "confluent", "landing.offset.field": "o"})
    report = ingest(handle, cfg, found["users-0"])
    assert report.records_appended == 3 and report.timestamps_from_mtime == 3
    assert [(r.offset, r.key, r.value) for r in iter_records(handle)] == [
        (0, b'{"id":1}', b'{"email":"a","id":1}'),
        (1, b'{"id":1}', None),
        (2, b'{"id":2}', b'{"email":"b","id":2}'),
    ]
    assert pending_files(landing_logs(landing_uri)[0]["users-0"], handle.manifest().ingested) == []
    assert ingest(handle, cfg, landing_logs(landing_uri)[0]["users-0"]).records_appended == 0


def landing_on_s3(store_uri: str, name: str) -> tuple[str, Storage]:
    uri = store_uri.rsplit("/", 1)[0] + "/" + name
    return uri, Storage.open(uri)


def upload(land: Storage, path: str, local) -> None:
    """A file written locally by the connector's own library (fastavro, pyarrow), put on the bucket."""
    land.write_atomic(path, local.read_bytes())


def kept(store_uri: str, log: str = "users-0") -> list:
    return [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(LogStore(store_uri).log(log))]


def test_aiven_flat_names_on_s3(s3_store_uri, tmp_path):
    landing, land = landing_on_s3(s3_store_uri, "aiven")
    land.write_atomic(
        land.join("users-0-0.jsonl"),
        lines(
            [
                {
                    "key": "u1",
                    "value": {"email": "a"},
                    "offset": 0,
                    "timestamp": "2024-01-01T00:00:00Z",
                    "headers": [{"key": "h", "value": "1"}],
                },
                {"key": "u1", "value": None, "offset": 1, "timestamp": 1_704_067_200_001, "headers": []},
            ]
        ),
    )
    local = write_parquet(
        tmp_path / "users-0-2.parquet",
        pa.table(
            {
                "key": pa.array([b"u2", b"u1"]),
                "value": pa.array([{"email": "b", "n": 2}, None]),
                "offset": [2, 3],
                "timestamp": [12, 13],
                "headers": pa.array([[("x", b"y")], None], pa.map_(pa.string(), pa.binary())),
            }
        ),
    )
    upload(land, land.join("users-0-2.parquet"), local)
    found, refused = landing_logs(landing)
    assert list(found) == ["users-0"] and refused == [] and str(found["users-0"]).startswith("s3://")
    cfg = build_config({"landing.format": "aiven"})
    handle = LogStore(s3_store_uri).log("users-0")
    assert ingest(handle, cfg, found["users-0"]).records_appended == 4
    assert kept(s3_store_uri) == [
        (0, b"u1", b'{"email":"a"}', 1_704_067_200_000, [("h", b"1")]),
        (1, b"u1", None, 1_704_067_200_001, []),
        (2, b"u2", b'{"email":"b","n":2}', 12, [("x", b"y")]),
        (3, b"u1", None, 13, []),
    ]
    assert ingest(handle, cfg, landing_logs(landing)[0]["users-0"]).records_appended == 0


def test_lenses_envelopes_on_s3(s3_store_uri, tmp_path):
    landing, land = landing_on_s3(s3_store_uri, "lenses")
    land.write_atomic(
        land.join("users", "0", "000000000001_5_6.json"),
        lines(
            [
                {
                    "key": b64(b"\x00k"),
                    "keyIsArray": True,
                    "value": {"email": "a"},
                    "headers": {"h": "1"},
                    "metadata": {"timestamp": 5, "topic": "users", "partition": 0, "offset": 0},
                },
                {
                    "key": b64(b"\x00k"),
                    "keyIsArray": True,
                    "value": None,
                    "headers": {},
                    "metadata": {"timestamp": 6, "topic": "users", "partition": 0, "offset": 1},
                },
            ]
        ),
    )
    schema = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", "string"], "default": None},
            {"name": "headers", "type": {"type": "map", "values": "string"}},
            {
                "name": "metadata",
                "type": {
                    "type": "record",
                    "name": "Meta",
                    "fields": [{"name": "timestamp", "type": "long"}, {"name": "offset", "type": "long"}],
                },
            },
        ],
    }
    local = write_avro(
        tmp_path / "l.avro", schema, [{"key": "b", "headers": {}, "metadata": {"timestamp": 7, "offset": 2}}]
    )
    upload(land, land.join("users", "0", "000000000002_7_7.avro"), local)
    found, refused = landing_logs(landing)
    assert list(found) == ["users-0"] and refused == []
    cfg = build_config({"landing.format": "lenses"})
    handle = LogStore(s3_store_uri).log("users-0")
    assert ingest(handle, cfg, found["users-0"]).records_appended == 3
    assert kept(s3_store_uri) == [
        (0, b"\x00k", b'{"email":"a"}', 5, [("h", b"1")]),
        (1, b"\x00k", None, 6, []),
        (2, b"b", None, 7, []),
    ]
    assert pending_files(landing_logs(landing)[0]["users-0"], handle.manifest().ingested) == []


ROW = pa.struct([("id", pa.int32()), ("email", pa.string())])
ENVELOPE = pa.schema(
    [
        ("before", ROW),
        ("after", ROW),
        ("op", pa.string()),
        ("ts_ms", pa.int64()),
        ("source", pa.struct([("connector", pa.string()), ("lsn", pa.int64())])),
        ("kafka_offset", pa.int64()),
    ]
)


def dbz(op: str, row_id: int, email: str, lsn: int, offset: int) -> dict:
    row = {"id": row_id, "email": email}
    return {
        "before": row if op == "d" else None,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": 1_700_000_000_000,
        "source": {"connector": "postgresql", "lsn": lsn},
        "kafka_offset": offset,
    }


def test_debezium_in_confluent_parquet_on_s3_ends_at_each_rows_latest_change(s3_store_uri, tmp_path):
    landing, land = landing_on_s3(s3_store_uri, "topics")
    events = [
        dbz("c", 1, "a1", 100, 0),
        dbz("u", 1, "a3", 300, 1),
        dbz("u", 1, "a2", 200, 2),  # late, older
        dbz("c", 2, "b1", 150, 3),
        dbz("d", 2, "b1", 400, 4),
        dbz("u", 2, "stale", 350, 6),
    ]
    part = land.join("users", "partition=0")
    upload(
        land,
        f"{part}/{confluent_name('users', 0, 0, ext='snappy.parquet')}",
        write_parquet(tmp_path / "v.parquet", pa.Table.from_pylist(events, ENVELOPE)),
    )
    upload(
        land,
        f"{part}/{confluent_name('users', 0, 0, '.keys', 'snappy.parquet')}",
        write_parquet(tmp_path / "k.parquet", pa.table({"id": [1, 1, 1, 2, 2, 2]})),
    )
    upload(
        land,
        land.join("users", "tombstone", confluent_name("users", 0, 5, ".keys", "snappy.parquet")),
        write_parquet(tmp_path / "t.parquet", pa.table({"id": [2]})),
    )
    cfg = build_config(
        {
            "landing.format": "confluent",
            "landing.offset.field": "kafka_offset",
            "cdc.format": "debezium",
            "cdc.version.fields": "source.lsn",
            "compaction.strategy": "header",
            "compaction.strategy.header": "dbz.version",
        }
    )
    handle = LogStore(s3_store_uri).log("users-0")
    report = ingest(handle, cfg, landing_logs(landing)[0]["users-0"])
    assert report.records_appended == 7 and report.offsets_inferred == ()
    assert [o for o, *_ in kept(s3_store_uri)] == list(range(7))
    state = with_value_columns(handle, latest_state_table(handle, cfg))
    assert state.column("key").to_pylist() == [b'{"id":1}'] and state.column("email").to_pylist() == ["a3"]
