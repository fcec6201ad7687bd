"""Debezium change events shaped column by column (ingest/connectors/debezium_columns.py through each
connector's column-wise shapes) give the very Columns that the per-row shapes and `apply_cdc` give: stored
keys and values (after for c, u, r; tombstones for d, null events and `__deleted`), the packed version header
after the record's own, offsets, timestamps, value schema and each row's line; and step aside for every event
the per-row path refuses or reads otherwise. Pinned over random files in Aiven's, Lenses' and Confluent's
JSON and in Aiven's Parquet, raw and flattened, with every kind of version field, and over odd events one by
one."""

from __future__ import annotations

import json
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.debezium import apply_cdc
from compaction_assets.ingest.connectors.registry import connector_for
from compaction_assets.ingest.connectors.shaping import columns, json_rows
from compaction_assets.ingest.formats import readers
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat, LandingFormat
from tests.log.connectors.test_json_columns import TEXTS, _headers, _lines, _unit
from tests.log.connectors.test_vectorised import assert_same

VERSIONED = {"compaction.strategy": "header", "compaction.strategy.header": "dbz.version"}


def _cfg(fmt: str, cdc: str, fields: str | None, **more: str):
    settings = {"landing.format": fmt, "cdc.format": cdc, **more}
    if fields:
        settings |= VERSIONED | {"cdc.version.fields": fields}
    return build_config(settings).landing


def _both(fmt: LandingFormat, files: list[bytes], cfg, kind: FileFormat = FileFormat.JSONL, tables=None):
    """(the column-wise Columns or None, the per-row Columns or the per-row refusal's text)."""
    connector = connector_for(fmt)
    names = [f"s3://b/f{i}.json" for i in range(len(files))]
    unit = _unit(names)
    if tables is not None:
        fast = connector.parquet_columns(tables, unit, names[0], cfg)
    else:
        parsed = [json_rows.parse_lines(data) for data in files]
        fast = None if any(p is None for p in parsed) else connector.json_columns(parsed, unit, names[0], cfg)
    try:
        rows = [readers.read_rows(data, kind, name) for data, name in zip(files, names)]
        raw = connector.raw_records(rows, [kind] * len(files), names, unit, cfg)
        slow: columns.Columns | str = columns.from_raw(apply_cdc(raw, cfg), names[0])
    except InvalidInputError as exc:
        slow = f"refused: {exc}"
    return fast, slow


def _pinned(fast, slow) -> None:
    if isinstance(slow, str):
        assert fast is None, slow
    elif fast is not None:
        assert_same(fast, slow)


def _row(rng: random.Random, i: int) -> dict:
    return {"id": i % 13, "email": rng.choice(TEXTS), "n": rng.choice([0, -1, 2**63 - 1, i]), "tags": ["a"] * (i % 3)}


def _source(rng: random.Random, i: int) -> dict:
    return {
        "connector": "postgresql",
        "lsn": rng.choice([0, 2**40 - 1, 1000 + i]),
        "file": f"mysql-bin.{i % 5:06d}",
        "pos": rng.randrange(2**32),
        "row": rng.randrange(2**11),
        "scn": rng.choice([str(rng.randrange(10**12)), str(2**63 - 1), "0"]),
        "ts_ms": 1.5 if i % 2 else 2.5,  # a float beside: not stored, not read
    }


def _event(rng: random.Random, i: int) -> dict | None:
    if i % 17 == 16:
        return None  # the tombstone Debezium writes after a delete
    op = rng.choice("cudr")
    row = _row(rng, i)
    return {
        "before": None if op in "cr" else row,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": 1_700_000_000_000 + i,
        "source": _source(rng, i),
    }


def _flat_row(rng: random.Random, i: int, deleted: str) -> dict | None:
    if i % 17 == 16:
        return None
    row: dict[str, Any] = _row(rng, i) | {"__lsn": 10 * i, "__op": "u", "__source_ts_ms": 5}
    if deleted == "text":
        row["__deleted"] = rng.choice(["true", "false", "TRUE", "False"])
    elif deleted == "bool":
        row["__deleted"] = rng.random() < 0.3
    return row


def _records(fmt: LandingFormat, values: list, rng: random.Random) -> list[bytes]:
    if fmt is LandingFormat.AIVEN:
        records = [{"key": {"id": i}, "value": v, "offset": i, "timestamp": 7 + i} for i, v in enumerate(values)]
        return [_lines(records)]
    if fmt is LandingFormat.LENSES:
        envelopes = []
        for i, v in enumerate(values):
            envelope = {"key": {"id": i}, "value": v, "headers": _headers(rng, "records")}
            envelopes.append(envelope | {"metadata": {"timestamp": 7 + i, "offset": i}})
        return [_lines(envelopes)]
    with_fields = [v if v is None else v | {"kafka_offset": 100 + i} for i, v in enumerate(values)]
    return [_lines(with_fields), _lines([{"id": i} for i in range(len(values))])]


FIELDS = [None, "source.lsn", "source.file,source.pos,source.row", "source.scn", "source.lsn:40,source.row:23"]


@pytest.mark.parametrize("fmt", [LandingFormat.AIVEN, LandingFormat.LENSES, LandingFormat.CONFLUENT])
@pytest.mark.parametrize("fields", FIELDS)
@pytest.mark.parametrize("seed", range(2))
def test_raw_envelopes_column_wise_are_the_per_row_records(seed, fields, fmt):
    rng = random.Random(seed)
    values = [_event(rng, i) for i in range(rng.randrange(20, 300))]
    more = {"landing.offset.field": "kafka_offset"} if fmt is LandingFormat.CONFLUENT else {}
    if fmt is LandingFormat.CONFLUENT:
        values = [v for v in values if v is not None]  # a Confluent null value lands in tombstone/
    cfg = _cfg(fmt.value, "debezium", fields, **more)
    fast, slow = _both(fmt, _records(fmt, values, rng), cfg)
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize("deleted", ["text", "bool", "absent"])
@pytest.mark.parametrize("fields", [None, "__lsn"])
def test_flattened_rows_column_wise_are_the_per_row_records(fields, deleted):
    rng = random.Random(len(deleted))
    values = [_flat_row(rng, i, deleted) for i in range(200)]
    cfg = _cfg("aiven", "debezium-flat", fields)
    fast, slow = _both(LandingFormat.AIVEN, _records(LandingFormat.AIVEN, values, rng), cfg)
    assert fast is not None
    _pinned(fast, slow)


def test_parquet_envelopes_column_wise_are_the_per_row_records(tmp_path):
    rng = random.Random(5)
    records = [
        {"key": f"k{i % 9}", "value": _event(rng, i), "offset": i, "timestamp": i, "headers": [("h", "v")] * (i % 2)}
        for i in range(300)
    ]
    path = tmp_path / "users-0-0.parquet"
    row = pa.struct([("id", pa.int64()), ("email", pa.string()), ("n", pa.int64()), ("tags", pa.list_(pa.string()))])
    source = pa.struct(
        [(n, pa.int64()) for n in ("lsn", "pos", "row")] + [("file", pa.string()), ("ts_ms", pa.float64())]
    )
    event = pa.struct([("before", row), ("after", row), ("op", pa.string()), ("ts_ms", pa.int64()), ("source", source)])
    schema = pa.schema(
        [("key", pa.string()), ("value", event), ("offset", pa.int64()), ("timestamp", pa.int64()),
         ("headers", pa.map_(pa.string(), pa.string()))]
    )  # fmt: skip
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)
    cfg = _cfg("aiven", "debezium", "source.file,source.pos,source.row")
    fast, slow = _both(LandingFormat.AIVEN, [path.read_bytes()], cfg, FileFormat.PARQUET, [pq.read_table(path)])
    assert fast is not None
    _pinned(fast, slow)


def _one(value: Any, extra: str = "") -> str:
    return json.dumps({"key": "k", "value": value, "offset": 0, "timestamp": 1}) + "\n" + extra


AFTER = {"id": 1}
ODD = [
    (_one({"op": "t", "after": None, "source": {"lsn": 1}}), "source.lsn"),  # a truncate: refused
    (_one({"op": "x", "after": AFTER, "source": {"lsn": 1}}), "source.lsn"),
    (_one({"after": AFTER, "source": {"lsn": 1}}), "source.lsn"),  # no op
    (_one({"op": None, "after": AFTER, "source": {"lsn": 1}}), "source.lsn"),
    (_one({"op": "c", "source": {"lsn": 1}}), "source.lsn"),  # no after
    (_one({"op": "c", "after": None, "source": {"lsn": 1}}), "source.lsn"),
    (_one({"op": "d", "before": AFTER, "source": {"lsn": 1}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": -1}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": 2**63}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": 2**40}}), "source.lsn:40,source.row:23"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": 1.5}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": True}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": "mysql-bin.000042"}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": "00000027:00000758:0003"}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": "bin.\u0663"}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": "none"}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": "7\n"}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"lsn": {"a": 1}}}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": {"file": "f1"}}), "source.file,source.pos,source.row"),
    (_one({"op": "c", "after": AFTER, "source": None}), "source.lsn"),
    (_one({"op": "c", "after": AFTER, "source": "text"}), "source.lsn"),
    (_one({"op": "c", "after": {"id": 1, "x": None}, "source": {"lsn": 1}}), "source.lsn"),
    (_one({"op": "c", "after": {"id": 1.5}, "source": {"lsn": 1}}), None),
    (_one({"op": "c", "after": "text", "source": {"lsn": 1}}), None),
    (_one({"op": "c", "after": [1, 2], "source": {"lsn": 1}}), None),
    (_one({"op": "d", "after": None}) + _one({"op": "c", "after": AFTER}), None),
    (_one("text"), None),
    (_one(None), "source.lsn"),
    (_one({}), None),
]


@pytest.mark.parametrize("case", ODD, ids=range(len(ODD)))
def test_raw_events_the_columns_cannot_read_exactly_are_read_by_row(case):
    text, fields = case
    fast, slow = _both(LandingFormat.AIVEN, [text.encode()], _cfg("aiven", "debezium", fields))
    _pinned(fast, slow)
    assert (fast is not None) == (ODD.index(case) in TAKEN), "the columns take these odd events, and only these"


TAKEN = {6, 12, 19, 20, 23, 24, 25, 27}

FLAT_ODD = [
    _one({"id": 1, "__deleted": "TRUE", "__lsn": 3}),
    _one({"id": 1, "__deleted": "Tru\u00e9", "__lsn": 3}),
    _one({"id": 1, "__deleted": 1, "__lsn": 3}),
    _one({"id": 1, "__deleted": None, "__lsn": 3}),
    _one({"id": 1, "__lsn": None}),
    _one("text"),
    _one([1]),
]


@pytest.mark.parametrize("text", FLAT_ODD, ids=range(len(FLAT_ODD)))
def test_flattened_rows_the_columns_cannot_read_exactly_are_read_by_row(text):
    _pinned(*_both(LandingFormat.AIVEN, [text.encode()], _cfg("aiven", "debezium-flat", "__lsn")))


def test_a_truncate_is_named_by_the_ingestion(tmp_path, store):
    """Through the ingestion: the column-wise path declines and the refusal names the file and line."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    root = tmp_path / "landing"
    root.mkdir()
    good = "".join(_one({"op": "c", "after": {"id": i}, "source": {"lsn": i}}) for i in range(3))
    (root / "users-0-0.jsonl").write_text(good + _one({"op": "t", "after": None, "source": {"lsn": 9}}))
    handle = store.log("users-0")
    cfg = build_config({"landing.format": "aiven", "cdc.format": "debezium"})
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, cfg, landing_logs(str(root))[0]["users-0"])
    message = str(info.value)
    assert "users-0-0.jsonl: line 4: op='t' (truncate)" in message and "\n" not in message
    assert not handle.exists()


ROW_AVRO = {
    "type": "record",
    "name": "Value",
    "namespace": "app.public.users",
    "fields": [{"name": "id", "type": "long"}, {"name": "email", "type": ["null", "string"]}],
}
ENVELOPE_AVRO = {
    "type": "record",
    "name": "Envelope",
    "namespace": "app.public.users",
    "fields": [
        {"name": "before", "type": ["null", ROW_AVRO]},
        {"name": "after", "type": ["null", "app.public.users.Value"]},  # the named type given again by name
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"]},
        {
            "name": "source",
            "type": {"type": "record", "name": "Source", "fields": [{"name": "lsn", "type": ["null", "long"]}]},
        },
    ],
}


def test_avro_envelopes_column_wise_are_the_per_row_records(tmp_path):
    """Debezium's Avro envelopes as Confluent's sink writes them (value file and keys file)."""
    from compaction_assets.ingest.formats import avro_columns
    from tests.log.connectors.sinks import write_avro

    rng = random.Random(9)
    events = []
    for i in range(200):
        op = rng.choice("cudr")
        row = {"id": i % 11, "email": rng.choice([None, "a@x", "é"])}
        events.append({"before": row if op in "ud" else None, "after": None if op == "d" else row, "op": op,
                       "ts_ms": i, "source": {"lsn": 1000 + i}})  # fmt: skip
    values = write_avro(tmp_path / "users+0+0000000000.avro", ENVELOPE_AVRO, events).read_bytes()
    keys = write_avro(tmp_path / "users+0+0000000000.keys.avro", "long", [e["source"]["lsn"] for e in events])
    files = [values, keys.read_bytes()]
    cfg = _cfg("confluent", "debezium", "source.lsn")
    connector = connector_for(LandingFormat.CONFLUENT)
    names = [f"s3://b/f{i}.avro" for i in range(2)]
    records = [avro_columns.read_records(data) for data in files]
    assert all(r is not None for r in records)
    fast = connector.avro_columns(records, _unit(names), names[0], cfg)
    rows = [readers.read_rows(data, FileFormat.AVRO, name) for data, name in zip(files, names)]
    raw = connector.raw_records(rows, [FileFormat.AVRO] * 2, names, _unit(names), cfg)
    assert fast is not None
    assert_same(fast, columns.from_raw(apply_cdc(raw, cfg), names[0]))
