"""Confluent's S3 sink layout: values, .keys and .headers files row by row, tombstone/ files interleaved by
offset, offsets from landing.offset.field or gap-free files, timestamps from a field or the object's mtime."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.landing import ingest, landing_logs, pending_files
from compaction_assets.log.reader import iter_records
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import CONFLUENT_HEADERS_AVRO, confluent_name, write_avro, write_lines, write_parquet

KEY_AVRO = {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "int"}]}
VALUE_AVRO = {
    "type": "record",
    "name": "Value",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "email", "type": "string"},
        {"name": "kafka_offset", "type": "long"},
        {"name": "kafka_ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def avro_users(root, start: int, rows: list[tuple[int, str, int]], headers: bool = True):
    """A value file with its keys and headers files; rows are (id, email, offset)."""
    part = root / "users" / "partition=0"
    write_avro(
        part / confluent_name("users", 0, start),
        VALUE_AVRO,
        [{"id": i, "email": e, "kafka_offset": o, "kafka_ts": 1_700_000_000_000 + o} for i, e, o in rows],
    )
    write_avro(part / confluent_name("users", 0, start, ".keys"), KEY_AVRO, [{"id": i} for i, _, _ in rows])
    if headers:
        write_avro(
            part / confluent_name("users", 0, start, ".headers"),
            CONFLUENT_HEADERS_AVRO,
            [[{"key": "trace", "value": f"t{o}"}] for _, _, o in rows],
        )


def tombstones(root, start: int, ids: list[int]):
    return write_avro(
        root / "users" / "tombstone" / confluent_name("users", 0, start, ".keys"), KEY_AVRO, [{"id": i} for i in ids]
    )


AVRO_CFG = {
    "landing.format": "confluent",
    "landing.offset.field": "kafka_offset",
    "landing.timestamp.field": "kafka_ts",
}


def test_avro_values_keys_headers_and_tombstones_interleave_by_offset(tmp_path, store):
    root = tmp_path / "landing"
    avro_users(root, 0, [(1, "a@x", 0), (2, "b@x", 1), (1, "a2@x", 3)])
    tombstones(root, 2, [2])  # offset 2: between the values
    avro_users(root, 4, [(3, "c@x", 4), (2, "b2@x", 6)])
    tombstones(root, 5, [3])
    found, refused = landing_logs(root)
    assert list(found) == ["users-0"] and refused == []
    handle = store.log("users-0")
    report = ingest(handle, build_config(AVRO_CFG), found["users-0"])
    # the tombstones carry no timestamp field: each takes the time of the record before it, not its
    # object's mtime (years later than the values' own times here)
    assert report.records_appended == 7 and report.timestamps_from_mtime == 0
    got = list(iter_records(handle))
    assert [r.timestamp for r in got if r.value is None] == [got[1].timestamp, got[4].timestamp]
    assert [r.offset for r in got] == list(range(7))
    assert [json.loads(r.key)["id"] for r in got] == [1, 2, 2, 1, 3, 3, 2]
    assert [r.value is None for r in got] == [False, False, True, False, False, True, False]
    assert got[0].key == b'{"id":1}'  # canonical JSON: equal keys, equal bytes
    assert json.loads(got[0].value) == {"id": 1, "email": "a@x"}  # the inserted fields are not the value's
    assert got[3].timestamp == 1_700_000_000_003 and got[0].headers == [("trace", b"t0")]
    assert ingest(handle, build_config(AVRO_CFG), found["users-0"]).records_appended == 0  # at most once
    assert pending_files(found["users-0"], handle.manifest().ingested) == []


def test_json_gap_free_files_take_offsets_from_their_names_and_mtime_as_timestamp(tmp_path, store):
    part = tmp_path / "landing" / "users" / "partition=0"
    for start, ids in ((0, [1, 2, 1]), (3, [2, 3])):
        write_lines(part / confluent_name("users", 0, start, ext="json"), [{"id": i, "email": f"{i}@x"} for i in ids])
        write_lines(part / confluent_name("users", 0, start, ".keys", "json"), [{"id": i} for i in ids])
        write_lines(
            part / confluent_name("users", 0, start, ".headers", "json"),
            [{"headers": [{"key": "h", "value": str(i)}]} for i in ids],
        )
        os.utime(part / confluent_name("users", 0, start, ext="json"), (1000 + start, 1000 + start))
    handle = store.log("users-0")
    report = ingest(handle, build_config({"landing.format": "confluent"}), part)
    got = list(iter_records(handle))
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert [r.timestamp for r in got] == [1_000_000] * 3 + [1_003_000] * 2
    assert report.timestamps_from_mtime == 5 and "modification time" in report.timestamp_source
    assert report.offsets_inferred == (confluent_name("users", 0, 3, ext="json"),)  # the last: no next file
    assert got[4].headers == [("h", b"3")]


def test_parquet_keys_wrapped_as_key_and_headers_wrapped(tmp_path, store):
    part = tmp_path / "landing" / "users" / "partition=0"
    write_parquet(
        part / confluent_name("users", 0, 10, ext="snappy.parquet"),
        pa.table({"id": [7, 8], "email": ["g@x", "h@x"], "off": [10, 12], "ts": [5, 6]}),
    )
    write_parquet(
        part / confluent_name("users", 0, 10, ".keys", "snappy.parquet"),
        pa.table({"key": pa.array([{"id": 7}, {"id": 8}])}),
    )
    write_parquet(
        part / confluent_name("users", 0, 10, ".headers", "snappy.parquet"),
        pa.table({"headers": pa.array([[{"key": "a", "value": "1"}], []])}),
    )
    write_parquet(
        tmp_path / "landing" / "users" / "tombstone" / confluent_name("users", 0, 11, ".keys", "snappy.parquet"),
        pa.table({"key": pa.array([{"id": 7}])}),
    )
    handle = store.log("users-0")
    cfg = build_config({"landing.format": "confluent", "landing.offset.field": "off", "landing.timestamp.field": "ts"})
    ingest(handle, cfg, part)  # a partition folder given directly finds its tombstone/ files too
    got = list(iter_records(handle))
    assert [(r.offset, r.key, r.value) for r in got] == [
        (10, b'{"id":7}', b'{"email":"g@x","id":7}'),
        (11, b'{"id":7}', None),
        (12, b'{"id":8}', b'{"email":"h@x","id":8}'),
    ]
    assert got[0].headers == [("a", b"1")] and got[0].timestamp == 5


def test_a_gap_without_offset_field_is_refused_naming_the_file_when_tombstones_interleave(tmp_path, store):
    root = tmp_path / "landing"
    part = root / "users" / "partition=0"
    for start, ids in ((0, [1, 2]), (5, [3])):  # file 0 holds 2 records for offsets 0..4: a gap
        write_avro(
            part / confluent_name("users", 0, start),
            {"type": "record", "name": "V", "fields": [{"name": "id", "type": "int"}]},
            [{"id": i} for i in ids],
        )
        write_avro(part / confluent_name("users", 0, start, ".keys"), KEY_AVRO, [{"id": i} for i in ids])
    tombstones(root, 3, [1])
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": "confluent"}), landing_logs(root)[0]["users-0"])
    msg = str(info.value)
    assert confluent_name("users", 0, 0) in msg and "landing.offset.field" in msg and "\n" not in msg
    assert not handle.exists() or handle.manifest().log_end_offset == 0  # nothing of it written


def test_files_whose_row_counts_differ_are_refused_naming_them(tmp_path, store):
    part = tmp_path / "landing" / "users" / "partition=0"
    avro_users(tmp_path / "landing", 0, [(1, "a", 0), (2, "b", 1)], headers=False)
    write_avro(part / confluent_name("users", 0, 0, ".keys"), KEY_AVRO, [{"id": 1}])  # one key for two values
    with pytest.raises(InvalidInputError) as info:
        ingest(store.log("users-0"), build_config(AVRO_CFG), part)
    msg = str(info.value)
    assert "different numbers of records" in msg and ".keys.avro (1 rows)" in msg and "(2 rows)" in msg


def test_a_value_file_without_keys_is_refused(tmp_path, store):
    part = tmp_path / "landing" / "users" / "partition=0"
    avro_users(tmp_path / "landing", 0, [(1, "a", 0)])
    (part / confluent_name("users", 0, 0, ".keys")).unlink()
    with pytest.raises(InvalidInputError, match="store.kafka.keys=true"):
        ingest(store.log("users-0"), build_config(AVRO_CFG), part)


def test_a_late_file_below_the_log_end_is_refused_with_one_line(tmp_path, store):
    root = tmp_path / "landing"
    avro_users(root, 0, [(1, "a", 0), (2, "b", 1)])
    avro_users(root, 2, [(3, "c", 2)])
    handle = store.log("users-0")
    ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    tombstones(root, 1, [2])  # appears after offset 2 was ingested
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    assert "below the log end offset" in str(info.value) and "tombstone" in str(info.value)
    assert handle.manifest().log_end_offset == 3
