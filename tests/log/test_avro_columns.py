"""Avro read into Arrow (ingest/formats/avro_columns.py) gives what the per-record paths give: the native input file's
table (input_files.read_avro against read_avro_records) and each connector's Columns (stored keys and values,
offsets, timestamps, headers, value schema, the record each row names), or steps aside for the per-record
path, whose refusals name the file and record. Files written with fastavro as the connectors write them."""

from __future__ import annotations

import io
import random
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.layouts import LandedFile, Unit
from compaction_assets.ingest.connectors.registry import connector_for
from compaction_assets.ingest.connectors.shaping import columns
from compaction_assets.ingest.formats import avro_arrow, avro_columns, readers
from compaction_assets.ingest.formats.input_files import read_avro, read_avro_records
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat, LandingFormat
from tests.log.connectors.sinks import CONFLUENT_HEADERS_AVRO
from tests.log.connectors.test_vectorised import assert_same

TEXTS = ["", "a", "é", "日本語", "\U0001f600", 'quote"s', "back\\slash", "nul\x00", "tab\tx", "\u2028", "x" * 300]
MTIME = 1_700_000_000_123
HEADER = {
    "type": "record",
    "name": "Header",
    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "bytes"]}],
}
NATIVE = {
    "type": "record",
    "name": "Rec",
    "fields": [
        {"name": "offset", "type": ["null", "long"]},
        {"name": "key", "type": "bytes"},
        {"name": "value", "type": ["null", "string"]},
        {"name": "timestamp", "type": "long"},
        {"name": "headers", "type": ["null", {"type": "array", "items": HEADER}]},
    ],
}
VALUE = {
    "type": "record",
    "name": "User",
    "namespace": "acme",
    "fields": [
        {"name": "email", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "small", "type": "int"},
        {"name": "ok", "type": ["null", "boolean"]},
        {"name": "score", "type": ["null", "double"]},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
        {"name": "id", "type": {"type": "fixed", "name": "Id", "size": 2}},
        {"name": "plan", "type": {"type": "enum", "name": "Plan", "symbols": ["free", "pro"]}},
        {"name": "address", "type": ["null", {"type": "record", "name": "Address", "fields": [
            {"name": "zip", "type": ["null", "string"]}, {"name": "tags", "type": {"type": "array", "items": "string"}}
        ]}]},
        {"name": "previous", "type": ["null", "Address"]},
        {"name": "points", "type": {"type": "array", "items": ["null", "long"]}},
    ],
}  # fmt: skip


def _user(rng: random.Random, i: int) -> dict:
    """A value taking null, empty, nested, unicode, bytes and 64-bit forms in turn."""
    address = rng.choice([None, {"zip": None, "tags": []}, {"zip": rng.choice(TEXTS), "tags": ["a", "é"]}])
    return {
        "email": rng.choice(TEXTS),
        "n": rng.choice([0, 2**63 - 1, -(2**63), i]),
        "small": rng.choice([0, -(2**31), 2**31 - 1]),
        "ok": rng.choice([None, True, False]),
        "score": rng.choice([None, 0.1, -0.0, 1e300, 3.0, 2.5e-8]),
        "ratio": rng.choice([0.1, 1.5, -3.0]),
        "raw": rng.choice([b"", b"\x00\xff", "é".encode()]),
        "id": b"\x00\x01",
        "plan": rng.choice(["free", "pro"]),
        "address": address,
        "previous": rng.choice([None, address]),
        "points": [rng.choice([None, 1, -(2**63)]) for _ in range(i % 3)],
    }


def _avro(schema: Any, records: list) -> bytes:
    out = io.BytesIO()
    fastavro.writer(
        out, fastavro.parse_schema(schema), records, codec=random.Random(len(records)).choice(["null", "deflate"])
    )
    return out.getvalue()


def _native_outcome(read, path) -> Any:
    try:
        return read(path)
    except InvalidInputError as exc:
        return f"refused: {exc}"


def _native_both(tmp_path, data: bytes):
    path = tmp_path / "in.avro"
    path.write_bytes(data)
    return _native_outcome(read_avro, path), _native_outcome(lambda p: read_avro_records(data, str(p)), path)


@pytest.mark.parametrize("seed", range(6))
def test_native_avro_read_column_wise_is_the_records_table(tmp_path, seed):
    rng = random.Random(seed)
    records = []
    for i in range(rng.randrange(1, 300)):
        headers = rng.choice([None, [], [{"key": rng.choice(TEXTS), "value": rng.choice([None, b"\x00", b"v"])}]])
        value = rng.choice([*TEXTS, None])
        records.append({"offset": rng.choice([None, i]), "key": rng.choice(TEXTS).encode(), "value": value,
                        "timestamp": rng.choice([0, 2**63 - 1, -1]), "headers": headers})  # fmt: skip
    data = _avro(NATIVE, records)
    assert avro_columns.input_table(data) is not None
    fast, slow = _native_both(tmp_path, data)
    assert not isinstance(slow, str) and fast.equals(slow)


def _native_schema(**changes: Any) -> dict:
    fields = [f for f in NATIVE["fields"] if f["name"] not in changes]
    extra = [{"name": n, "type": t} for n, t in changes.items() if t is not None]
    return {**NATIVE, "fields": fields + extra}


ODD_NATIVE = [
    (_native_schema(extra="long"), {"extra": 1}),  # an unknown field: refused
    (_native_schema(value=None), {}),  # no value field: refused
    (_native_schema(value=["null", "string", "bytes"]), {"value": b"x"}),
    (_native_schema(value={"type": "record", "name": "V", "fields": [{"name": "a", "type": "long"}]}),
     {"value": {"a": 1}}),
    (_native_schema(timestamp={"type": "long", "logicalType": "timestamp-millis"}), {"timestamp": 5}),
    (_native_schema(timestamp="boolean"), {"timestamp": True}),
    (_native_schema(headers={"type": "map", "values": "bytes"}), {"headers": {"h": b"v"}}),
    (_native_schema(headers={"type": "array", "items": {"type": "record", "name": "H", "fields": [
        {"name": "name", "type": ["null", "string"]}, {"name": "value", "type": "string"}]}}),
     {"headers": [{"name": None, "value": "v"}]}),
    (_native_schema(headers={"type": "array", "items": "string"}), {"headers": ["h"]}),
]  # fmt: skip


@pytest.mark.parametrize("case", ODD_NATIVE, ids=range(len(ODD_NATIVE)))
def test_native_avro_the_columns_cannot_read_exactly_gives_the_per_record_outcome(tmp_path, case):
    schema, changes = case
    base = {"offset": 1, "key": b"k", "value": "v", "timestamp": 1, "headers": None}
    records = [{n: v for n, v in {**base, **changes}.items() if n in {f["name"] for f in schema["fields"]}}]
    fast, slow = _native_both(tmp_path, _avro(schema, records * 3))
    assert fast == slow if isinstance(slow, str) else fast.equals(slow)


def test_a_corrupt_block_is_named_by_the_per_record_path(tmp_path):
    records = [{"offset": i, "key": b"k", "value": "v" * 50, "timestamp": 1, "headers": None} for i in range(200)]
    data = bytearray(_avro(NATIVE, records))
    data[-40:-20] = b"\xff" * 20
    assert avro_columns.input_table(bytes(data)) is None
    fast, slow = _native_both(tmp_path, bytes(data))
    assert isinstance(slow, str) and fast == slow and "record" in slow


# --- the connectors ----------------------------------------------------------------------------------------

AIVEN = build_config({"landing.format": "aiven"}).landing
LENSES = build_config({"landing.format": "lenses"}).landing
CONFLUENT = build_config(
    {"landing.format": "confluent", "landing.offset.field": "kafka_offset", "landing.timestamp.field": "kafka_ts"}
).landing


def _connector_both(fmt: LandingFormat, files: list[bytes], cfg, tombstone: bool = False):
    """(the column-wise Columns or None, the per-row Columns or the per-row refusal's text)."""
    connector = connector_for(fmt)
    names = [f"s3://b/f{i}.avro" for i in range(len(files))]
    unit = Unit(names[0], tuple(LandedFile(n, n, MTIME) for n in names), 0, tombstone)
    records = [avro_columns.read_records(data) for data in files]
    fast = None if any(r is None for r in records) else connector.avro_columns(records, unit, names[0], cfg)
    try:
        rows = [readers.read_rows(data, FileFormat.AVRO, name) for data, name in zip(files, names)]
        raw = connector.raw_records(rows, [FileFormat.AVRO] * len(files), names, unit, cfg)
        slow: columns.Columns | str = columns.from_raw(raw, names[0])
    except InvalidInputError as exc:
        slow = f"refused: {exc}"
    return fast, slow


def _pinned(fast, slow) -> None:
    if isinstance(slow, str):
        assert fast is None, slow
    elif fast is not None:
        assert_same(fast, slow)


HEADERS_MAP = ["null", {"type": "map", "values": ["null", "bytes"]}]
AIVEN_SCHEMA = {
    "type": "record",
    "name": "connector_records",
    "fields": [
        {"name": "key", "type": ["null", "string"]},
        {"name": "value", "type": ["null", VALUE]},
        {"name": "offset", "type": "long"},
        {"name": "timestamp", "type": "long"},
        {"name": "headers", "type": HEADERS_MAP},
    ],
}


def _headers_map(rng: random.Random) -> dict | None:
    return rng.choice([None, {}, {"h": b"v", "é": None}, {"trace": b"\x00\xff"}])


@pytest.mark.parametrize("seed", range(4))
def test_aiven_avro_column_wise_is_the_per_row_records(seed):
    rng = random.Random(seed)
    records = [
        {"key": rng.choice([None, *TEXTS]), "value": None if i % 7 == 3 else _user(rng, i), "offset": i,
         "timestamp": rng.choice([0, 2**63 - 1]), "headers": _headers_map(rng)}
        for i in range(rng.randrange(1, 200))
    ]  # fmt: skip
    fast, slow = _connector_both(LandingFormat.AIVEN, [_avro(AIVEN_SCHEMA, records)], AIVEN)
    assert fast is not None
    _pinned(fast, slow)


LENSES_SCHEMA = {
    "type": "record",
    "name": "Envelope",
    "fields": [
        {"name": "key", "type": {"type": "record", "name": "Key", "fields": [{"name": "id", "type": "long"}]}},
        {"name": "value", "type": ["null", VALUE], "default": None},
        {"name": "headers", "type": {"type": "map", "values": "string"}},
        {"name": "metadata", "type": {"type": "record", "name": "Meta", "fields": [
            {"name": "timestamp", "type": "long"}, {"name": "topic", "type": "string"},
            {"name": "partition", "type": "int"}, {"name": "offset", "type": "long"}]}},
    ],
}  # fmt: skip


@pytest.mark.parametrize("seed", range(3))
def test_lenses_avro_column_wise_is_the_per_row_records(seed):
    rng = random.Random(seed)
    records = [
        {"key": {"id": i % 5}, "value": None if i % 4 == 1 else _user(rng, i), "headers": {"h": rng.choice(TEXTS)},
         "metadata": {"timestamp": 5 + i, "topic": "users", "partition": 0, "offset": i}}
        for i in range(rng.randrange(1, 200))
    ]  # fmt: skip
    fast, slow = _connector_both(LandingFormat.LENSES, [_avro(LENSES_SCHEMA, records)], LENSES)
    assert fast is not None
    _pinned(fast, slow)


def test_connect_properties_on_primitive_types_are_read_column_wise():
    """Kafka Connect's AvroData marks types with properties of its own (`connect.type`, `connect.name`)."""
    schema = {"type": "record", "name": "ConnectDefault", "namespace": "io.confluent.connect.avro", "fields": [
        {"name": "id", "type": {"type": "int", "connect.type": "int16"}},
        {"name": "name", "type": ["null", {"type": "string", "connect.parameters": {"a": "b"}}], "default": None},
        {"name": "kafka_offset", "type": "long"}, {"name": "kafka_ts", "type": "long"}],
        "connect.name": "io.confluent.connect.avro.ConnectDefault"}  # fmt: skip
    values = _avro(schema, [{"id": i, "name": [None, "é"][i % 2], "kafka_offset": i, "kafka_ts": 5} for i in range(9)])
    fast, slow = _connector_both(
        LandingFormat.CONFLUENT, [values, _avro("string", [f"k{i}" for i in range(9)])], CONFLUENT
    )
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize("with_headers", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_confluent_avro_column_wise_is_the_per_row_records(seed, with_headers):
    rng = random.Random(seed)
    n = rng.randrange(1, 200)
    value_schema = {**VALUE, "fields": VALUE["fields"] + [{"name": "kafka_offset", "type": "long"},
                                                            {"name": "kafka_ts", "type": "long"}]}  # fmt: skip
    values = [_user(rng, i) | {"kafka_offset": 10 + i, "kafka_ts": 7 * i} for i in range(n)]
    key_schema = ["string", {"type": "record", "name": "K", "fields": [{"name": "key", "type": "string"}]}][seed % 2]
    keys = [f"k{i}" if seed % 2 == 0 else {"key": f"k{i}"} for i in range(n)]
    files = [_avro(value_schema, values), _avro(key_schema, keys)]
    if with_headers:
        headers = [[{"key": rng.choice(TEXTS), "value": rng.choice([None, "v"])}] * (i % 3) for i in range(n)]
        files.append(_avro(CONFLUENT_HEADERS_AVRO, headers))
    fast, slow = _connector_both(LandingFormat.CONFLUENT, files, CONFLUENT)
    assert fast is not None
    _pinned(fast, slow)
    tombstones, slow_tombstones = _connector_both(LandingFormat.CONFLUENT, [files[1]], CONFLUENT, tombstone=True)
    assert tombstones is not None
    _pinned(tombstones, slow_tombstones)


def _aiven_with(field_type: Any, value: Any) -> bytes:
    schema = {**AIVEN_SCHEMA, "fields": [*AIVEN_SCHEMA["fields"][:1], {"name": "value", "type": field_type},
                                         *AIVEN_SCHEMA["fields"][2:]]}  # fmt: skip
    return _avro(schema, [{"key": "k", "value": value, "offset": 0, "timestamp": 1, "headers": None}])


ODD_CONNECTOR = [
    _aiven_with({"type": "map", "values": "long"}, {"b": 1, "a": 2}),  # a map value: a JSON object per row
    _aiven_with(["null", "string", "long"], 5),
    _aiven_with(
        {"type": "record", "name": "V", "fields": [{"name": "headers", "type": {"type": "map", "values": "long"}}]},
        {"headers": {"b": 1, "a": 2}},
    ),
    _aiven_with({"type": "long", "logicalType": "timestamp-millis"}, 5),
    _aiven_with({"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 2}, b"\x01"),
    _aiven_with({"type": "string", "logicalType": "uuid"}, "12345678-1234-5678-1234-567812345678"),
    _aiven_with({"type": "float"}, float("nan")),
]


@pytest.mark.parametrize("data", ODD_CONNECTOR, ids=range(len(ODD_CONNECTOR)))
def test_connector_avro_the_columns_cannot_read_exactly_is_read_by_row(data):
    _pinned(*_connector_both(LandingFormat.AIVEN, [data], AIVEN))


def test_a_headers_map_repeating_a_name_is_read_by_row():
    """fastavro keeps a map's last value for a repeated name; Arrow's map would keep both (fastavro cannot
    write such a file: the check is pinned on the Arrow array it would give)."""
    headers = pa.array(
        [[("a", "1")], [], None, [("h", "1"), ("g", "2"), ("h", "3")]], pa.map_(pa.string(), pa.string())
    )
    records = pa.StructArray.from_arrays([pa.array(["k"] * 4), headers], names=["key", "headers"])
    assert avro_columns.no_repeated_names(records.slice(0, 3))
    assert not avro_columns.no_repeated_names(records)


# --- the large files' reader (DataFusion) against fastavro's records -----------------------------------------


# DataFusion does not resolve a named type given again by its name (`previous`): such files go to fastavro
FLAT_VALUE = {**VALUE, "fields": [f for f in VALUE["fields"] if f["name"] != "previous"]}


def _with_value(schema: dict, value: dict) -> dict:
    return {
        **schema,
        "fields": [{**f, "type": ["null", value]} if f["name"] == "value" else f for f in schema["fields"]],
    }


def _files_of_every_shape() -> list[bytes]:
    rng = random.Random(7)
    users = [_user(rng, i) for i in range(300)]
    flat = [{n: v for n, v in u.items() if n != "previous"} for u in users]
    value_schema = {**FLAT_VALUE, "fields": FLAT_VALUE["fields"] + [{"name": "kafka_offset", "type": "long"}]}
    natives = [{"offset": i, "key": b"k", "value": rng.choice([*TEXTS, None]), "timestamp": i,
                "headers": rng.choice([None, [{"key": "h", "value": b"\x00"}]])} for i in range(300)]  # fmt: skip
    aiven = [{"key": rng.choice([None, *TEXTS]), "value": rng.choice([None, u]), "offset": i, "timestamp": 1,
              "headers": _headers_map(rng)} for i, u in enumerate(users)]  # fmt: skip
    meta = [{"timestamp": i, "topic": "t", "partition": 0, "offset": i} for i in range(300)]
    lenses = [
        {"key": {"id": i}, "value": u, "headers": {"h": "v"}, "metadata": m}
        for i, (u, m) in enumerate(zip(users, meta))
    ]
    for r, u in zip(aiven + lenses, flat + flat):
        r["value"] = u if r["value"] is not None else None
    return [
        _avro(NATIVE, natives),
        _avro(_with_value(AIVEN_SCHEMA, FLAT_VALUE), aiven),
        _avro(_with_value(LENSES_SCHEMA, FLAT_VALUE), lenses),
        _avro(value_schema, [u | {"kafka_offset": i} for i, u in enumerate(flat)]),
        _avro(NATIVE, []),
        _avro(AIVEN_SCHEMA, [{**r, "value": u} for r, u in zip(aiven, users)]),  # a named type named again
    ]


@pytest.mark.parametrize("index", range(6))
def test_the_arrow_reader_gives_fastavros_records_converted(index):
    data = _files_of_every_shape()[index]
    reader = fastavro.reader(io.BytesIO(data))
    typ = avro_columns.arrow_type(reader.writer_schema, {})
    expected = pa.array(list(reader), type=typ)
    read = avro_arrow.read_records(data, typ)
    assert read.equals(expected) if index < 5 else read is None


def test_a_large_native_file_read_by_the_arrow_reader_is_the_records_table(tmp_path):
    rng = random.Random(3)
    records = [{"offset": i, "key": f"key-{i % 1000}".encode(), "value": rng.choice(TEXTS) * 20, "timestamp": i,
                "headers": None if i % 3 else [{"key": "h", "value": b"v"}]} for i in range(40_000)]  # fmt: skip
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(NATIVE), records, codec="null")
    data = out.getvalue()
    assert len(data) >= avro_columns.ARROW_READER_BYTES
    fast, slow = _native_both(tmp_path, data)
    assert not isinstance(slow, str) and fast.equals(slow)
