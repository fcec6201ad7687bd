"""Aiven's flat `<topic>-<partition>-<start>` objects (JSONL, JSON, Avro, Parquet, CSV; gzip) and Lenses'
`<topic>/<partition>/<lastOffset>_<minTs>_<maxTs>` envelopes, with each connector's tombstone form."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from compaction_assets.errors import ConfigError, InvalidInputError
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log.reader import iter_records
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import b64, write_avro, write_lines, write_parquet

AIVEN_AVRO = {
    "type": "record",
    "name": "connector_records",
    "fields": [
        {"name": "key", "type": ["null", "bytes"]},
        {
            "name": "value",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "User",
                    "fields": [{"name": "email", "type": "string"}, {"name": "age", "type": "int"}],
                },
            ],
        },
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "headers", "type": ["null", {"type": "map", "values": ["null", "bytes"]}]},
    ],
}


def records(store, log="users-0"):
    return [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(store.log(log))]


def test_aiven_jsonl_gzip_without_extension_and_json_array(tmp_path, store):
    root = tmp_path / "landing"
    write_lines(
        root / "users-0-0",
        [
            {
                "key": "u1",
                "value": {"email": "a@x", "age": 3},
                "offset": 0,
                "timestamp": "2024-01-01T00:00:00Z",
                "headers": [{"key": "h", "value": "1"}],
            },
            {"key": "u2", "value": None, "offset": 2, "timestamp": "2024-01-01T00:00:01.500Z", "headers": []},
        ],
        gz=True,
    )
    write_lines(root / "users-0-5", [{"key": "u1", "value": "text", "offset": 5, "timestamp": 7}])
    found, refused = landing_logs(root)
    assert list(found) == ["users-0"] and refused == []
    ingest(
        store.log("users-0"),
        build_config({"landing.format": "aiven", "landing.file.format": "jsonl"}),
        found["users-0"],
    )
    assert records(store) == [
        (0, b"u1", b'{"age":3,"email":"a@x"}', 1_704_067_200_000, [("h", b"1")]),
        (2, b"u2", None, 1_704_067_201_500, []),
        (5, b"u1", b"text", 7, []),
    ]


def test_aiven_json_array_with_extension(tmp_path, store):
    root = tmp_path / "landing"
    root.mkdir()
    (root / "users-0-10.json").write_text(
        json.dumps(
            [
                {"key": {"id": 1}, "value": {"email": "a"}, "offset": 10, "timestamp": 1},
                {"key": {"id": 1}, "value": None, "offset": 11, "timestamp": 2},
            ]
        )
    )
    ingest(store.log("users-0"), build_config({"landing.format": "aiven"}), landing_logs(root)[0]["users-0"])
    assert [(o, k, v) for o, k, v, _, _ in records(store)] == [
        (10, b'{"id":1}', b'{"email":"a"}'),
        (11, b'{"id":1}', None),
    ]


def test_aiven_avro_parquet_and_csv(tmp_path, store):
    root = tmp_path / "landing"
    write_avro(
        root / "users-0-0.avro",
        AIVEN_AVRO,
        [
            {
                "key": b"\xff1",
                "value": {"email": "a", "age": 1},
                "offset": 0,
                "timestamp": 10,
                "headers": {"h": b"\x00"},
            },
            {"key": b"\xff1", "value": None, "offset": 1, "timestamp": 11, "headers": None},
        ],
    )
    write_parquet(
        root / "users-0-2.parquet",
        pa.table(
            {
                "key": pa.array([b"k2"]),
                "value": pa.array([{"email": "b", "age": 2}]),
                "offset": [2],
                "timestamp": [12],
                "headers": pa.array([[("x", b"y")]], pa.map_(pa.string(), pa.binary())),
            }
        ),
    )
    (root / "users-0-3.csv").write_text(f"{b64(b'k3')},{b64(b'v3')},3,13\n{b64(b'k3')},,4,14\n")
    ingest(store.log("users-0"), build_config({"landing.format": "aiven"}), landing_logs(root)[0]["users-0"])
    assert records(store) == [
        (0, b"\xff1", b'{"age":1,"email":"a"}', 10, [("h", b"\x00")]),
        (1, b"\xff1", None, 11, []),
        (2, b"k2", b'{"age":2,"email":"b"}', 12, [("x", b"y")]),
        (3, b"k3", b"v3", 13, []),
        (4, b"k3", None, 14, []),
    ]


def test_aiven_file_appearing_below_the_log_end_is_refused_naming_it(tmp_path, store):
    root = tmp_path / "landing"
    write_lines(root / "users-0-5.jsonl", [{"key": "a", "value": "1", "offset": 5, "timestamp": 1}])
    cfg = build_config({"landing.format": "aiven"})
    ingest(store.log("users-0"), cfg, landing_logs(root)[0]["users-0"])
    write_lines(root / "users-0-3.jsonl", [{"key": "a", "value": "0", "offset": 3, "timestamp": 1}])
    with pytest.raises(InvalidInputError) as info:
        ingest(store.log("users-0"), cfg, landing_logs(root)[0]["users-0"])
    assert "users-0-3.jsonl: line 1" in str(info.value) and "below the log end offset 6" in str(info.value)


def test_ingestion_stops_at_a_malformed_file_keeping_the_files_before_it(tmp_path, store):
    # the second file is read ahead while the first is appended: its error still comes after the first's
    # commit, and the third file, after it, is not ingested
    root = tmp_path / "landing"
    write_lines(root / "users-0-0.jsonl", [{"key": "a", "value": "1", "offset": 0, "timestamp": 1}])
    (root / "users-0-1.jsonl").write_text('{"key": "b", "value": "2", "offset": 1, "timestamp": 2}\n{"key": \n')
    write_lines(root / "users-0-2.jsonl", [{"key": "c", "value": "3", "offset": 2, "timestamp": 3}])
    cfg = build_config({"landing.format": "aiven"})
    with pytest.raises(InvalidInputError) as info:
        ingest(store.log("users-0"), cfg, landing_logs(root)[0]["users-0"])
    assert "users-0-1.jsonl" in str(info.value) and "line 2" in str(info.value)
    assert records(store) == [(0, b"a", b"1", 1, [])]
    assert store.log("users-0").manifest().ingested == ("users-0-0.jsonl",)


def test_lenses_json_envelopes_with_byte_keys_and_null_tombstones(tmp_path, store):
    root = tmp_path / "landing"
    write_lines(
        root / "users" / "0" / "000000000001_1700000000000_1700000000001.json",
        [
            {
                "key": b64(b"\x00k"),
                "keyIsArray": True,
                "value": b64(b"\x01v"),
                "valueIsArray": True,
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
        ],
    )
    write_lines(
        root / "users" / "0" / "000000000002_1700000000002_1700000000002.json",
        [{"key": {"id": 1}, "value": {"email": "e"}, "metadata": {"timestamp": 7, "offset": 2}}],
    )
    found, refused = landing_logs(root)
    assert list(found) == ["users-0"] and refused == []
    ingest(store.log("users-0"), build_config({"landing.format": "lenses"}), found["users-0"])
    assert records(store) == [
        (0, b"\x00k", b"\x01v", 5, [("h", b"1")]),
        (1, b"\x00k", None, 6, []),
        (2, b'{"id":1}', b'{"email":"e"}', 7, []),
    ]


def test_lenses_avro_and_parquet_missing_value_is_a_tombstone(tmp_path, store):
    root = tmp_path / "landing"
    meta = {
        "type": "record",
        "name": "Meta",
        "fields": [{"name": "timestamp", "type": "long"}, {"name": "offset", "type": "long"}],
    }
    schema = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", "string"], "default": None},
            {"name": "headers", "type": {"type": "map", "values": "string"}},
            {"name": "metadata", "type": meta},
        ],
    }
    write_avro(
        root / "users" / "0" / "000000000001_1_2.avro",
        schema,
        [
            {"key": "a", "value": "1", "headers": {}, "metadata": {"timestamp": 1, "offset": 0}},
            {"key": "a", "headers": {}, "metadata": {"timestamp": 2, "offset": 1}},
        ],
    )
    write_parquet(
        root / "users" / "0" / "000000000002_3_3.parquet",
        pa.table({"key": ["b"], "metadata": pa.array([{"timestamp": 3, "offset": 2}])}),
    )
    ingest(store.log("users-0"), build_config({"landing.format": "lenses"}), landing_logs(root)[0]["users-0"])
    assert [(o, k, v) for o, k, v, _, _ in records(store)] == [(0, b"a", b"1"), (1, b"a", None), (2, b"b", None)]


def test_a_misnamed_file_is_refused_for_its_format(tmp_path, store):
    root = tmp_path / "landing"
    write_lines(root / "users" / "0" / "data.json", [{"key": "a", "value": "1", "metadata": {"offset": 0}}])
    with pytest.raises(InvalidInputError, match="data.json: not named as the lenses connector"):
        ingest(store.log("users-0"), build_config({"landing.format": "lenses"}), landing_logs(root)[0]["users-0"])


@pytest.mark.parametrize(
    "raw, key",
    [
        ({"landing.format": "kafka"}, "landing.format"),
        ({"landing.file.format": "xml"}, "landing.file.format"),
        ({"landing.offset.field": ""}, "landing.offset.field"),
        ({"landing.timestamp.field": 3}, "landing.timestamp.field"),
        ({"landing.format": "aiven", "cdc.format": "maxwell"}, "cdc.format"),
        ({"cdc.format": "debezium"}, "cdc.format"),
        (
            {"landing.format": "aiven", "cdc.format": "debezium", "cdc.version.fields": "source.lsn"},
            "cdc.version.fields",
        ),
        (
            {
                "landing.format": "aiven",
                "cdc.format": "none",
                "compaction.strategy": "header",
                "compaction.strategy.header": "v",
                "cdc.version.fields": "source.lsn",
            },
            "cdc.version.fields",
        ),
        (
            {
                "landing.format": "aiven",
                "cdc.format": "debezium",
                "compaction.strategy": "header",
                "compaction.strategy.header": "v",
                "cdc.version.fields": "a:40,b:30",
            },
            "cdc.version.fields",
        ),
    ],
)
def test_landing_keys_are_validated_with_one_line(raw, key):
    with pytest.raises(ConfigError) as info:
        build_config(raw, "users")
    msg = str(info.value)
    assert "'users'" in msg and key in msg and "\n" not in msg


def test_landing_keys_round_trip_and_stay_out_of_default_configs():
    raw = {
        "landing.format": "confluent",
        "landing.offset.field": "o",
        "cdc.format": "debezium",
        "compaction.strategy": "header",
        "compaction.strategy.header": "v",
        "cdc.version.fields": "source.file,source.pos,source.row",
    }
    cfg = build_config(raw)
    assert build_config(cfg.to_kafka()) == cfg
    assert [f.bits for f in cfg.landing.version_fields] == [20, 32, 11]
    assert "landing.format" not in build_config({}).to_kafka()
