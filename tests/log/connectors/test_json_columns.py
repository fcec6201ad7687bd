"""The connectors' JSON Lines shaped column by column (ingest/connectors/shaping/json_columns.py) give the very Columns
the per-row shapes give (stored keys and values, offsets, timestamps, headers, value schema, the line each
row names), and step aside for every file the per-row shapes would refuse or read otherwise: pinned over
random files in each connector's record shape and over the awkward and refused shapes one by one."""

from __future__ import annotations

import gzip
import json
import random
from typing import Any

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.layouts import LandedFile, Unit
from compaction_assets.ingest.connectors.registry import connector_for
from compaction_assets.ingest.connectors.shaping import columns, json_rows
from compaction_assets.ingest.formats import readers
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat, LandingFormat
from tests.log.connectors.test_vectorised import assert_same

TEXTS = ["", "a", "é", "日本語", "\U0001f600", 'quote"s', "back\\slash", "nul\x00", "tab\tx", "\u2028", "x" * 300]
MTIME = 1_700_000_000_123
AIVEN = build_config({"landing.format": "aiven"}).landing
LENSES = build_config({"landing.format": "lenses"}).landing
CONFLUENT = build_config(
    {"landing.format": "confluent", "landing.offset.field": "kafka_offset", "landing.timestamp.field": "kafka_ts"}
).landing
CONFLUENT_PLAIN = build_config({"landing.format": "confluent"}).landing


def _value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value whose objects give every field in every line (so that the columns can read it)."""
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.choice(TEXTS)
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, -(2**63), 12345678901234])
    if kind == 2:
        return rng.choice([True, False])
    if kind == 3:
        return None
    if kind == 4:
        return [rng.choice([1, None, -7])] * rng.randrange(3)
    return {"ok": rng.choice(TEXTS), "n": rng.randrange(100), "é": [rng.choice(TEXTS)] * rng.randrange(2)}


def _object(rng: random.Random, i: int) -> dict:
    """A value object whose fields and types are the same in every line (nested, unicode, lists, 64-bit)."""
    return {
        "email": rng.choice(TEXTS),
        "n": rng.choice([0, 2**63 - 1, -(2**63), i]),
        "ok": rng.random() < 0.5,
        "address": {"zip": rng.choice(TEXTS), "geo": {"lat": rng.randrange(90), "tags": ["a"] * (i % 3)}},
        "points": [{"x": i, "label": rng.choice(TEXTS)} for _ in range(i % 3)],
        "Zfirst": "Z",
    }


def _headers(rng: random.Random, shape: str) -> Any:
    if shape == "records":
        return [{"key": rng.choice(TEXTS), "value": rng.choice([*TEXTS, None])} for _ in range(rng.randrange(3))]
    if shape == "names":
        return [{"name": rng.choice(TEXTS), "value": rng.choice(TEXTS)} for _ in range(rng.randrange(3))]
    if shape == "pairs":
        return [[rng.choice(TEXTS), rng.choice([*TEXTS, None])] for _ in range(rng.randrange(3))]
    return rng.choice([{}, None]) if shape == "empty" else None


def _lines(objs: list) -> bytes:
    return "".join(
        json.dumps(o, ensure_ascii=len(o) % 2 == 0 if isinstance(o, dict) else False) + "\n" for o in objs
    ).encode()


def _unit(names: list[str], tombstone: bool = False) -> Unit:
    return Unit(names[0], tuple(LandedFile(n, n, MTIME) for n in names), 0, tombstone)


def _both(fmt: LandingFormat, files: list[bytes], cfg, tombstone: bool = False, kind: FileFormat = FileFormat.JSONL):
    """(the column-wise Columns or None, the per-row Columns or the per-row refusal's text)."""
    connector = connector_for(fmt)
    names = [f"s3://b/f{i}.json" for i in range(len(files))]
    unit = _unit(names, tombstone)
    parse = json_rows.parse_lines if kind is FileFormat.JSONL else json_rows.parse_array
    parsed = [parse(data) for data in files]
    fast = None if any(p is None for p in parsed) else connector.json_columns(parsed, unit, names[0], cfg)
    try:
        rows = [readers.read_rows(data, kind, name) for data, name in zip(files, names)]
        raw = connector.raw_records(rows, [kind] * len(files), names, unit, cfg)
        slow: columns.Columns | str = columns.from_raw(raw, names[0])
    except InvalidInputError as exc:
        slow = f"refused: {exc}"
    return fast, slow


def _pinned(fast, slow) -> None:
    """The fast path's Columns are the per-row ones; where it declines, the per-row path decides alone."""
    if isinstance(slow, str):
        assert fast is None, slow
    elif fast is not None:
        assert_same(fast, slow)


def _aiven_record(rng: random.Random, i: int, shape: str, values: str) -> dict:
    value = _object(rng, i) if values == "objects" else _value(rng)
    record = {"key": rng.choice(TEXTS) + str(i % 7), "value": None if i % 9 == 4 else value}
    record |= {"offset": i, "timestamp": rng.choice([0, 2**63 - 1, 1_700_000_000_000 + i])}
    if shape != "absent":
        record["headers"] = _headers(rng, shape)
    return record


@pytest.mark.parametrize("shape", ["records", "names", "pairs", "empty", "absent"])
@pytest.mark.parametrize("seed", range(3))
def test_aiven_lines_column_wise_are_the_per_row_records(seed, shape):
    rng = random.Random(seed)
    records = [_aiven_record(rng, i, shape, "objects") for i in range(rng.randrange(1, 300))]
    fast, slow = _both(LandingFormat.AIVEN, [_lines(records)], AIVEN)
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize("seed", range(6))
def test_aiven_lines_of_any_json_value_are_the_per_row_records_or_read_by_row(seed):
    """Keys and values of every JSON type, a type per file (text, numbers, lists, objects, null)."""
    rng = random.Random(seed)
    kind = seed % 3
    records = [
        {"key": _value(rng) if kind == 0 else {"id": i}, "value": _value(rng), "offset": i, "timestamp": 1}
        for i in range(50)
    ]
    _pinned(*_both(LandingFormat.AIVEN, [_lines(records)], AIVEN))


@pytest.mark.parametrize("shape", ["records", "pairs", "empty"])
@pytest.mark.parametrize("seed", range(3))
def test_lenses_envelopes_column_wise_are_the_per_row_records(seed, shape):
    rng = random.Random(seed)
    envelopes = []
    for i in range(rng.randrange(1, 300)):
        envelope = {"key": rng.choice(TEXTS), "headers": _headers(rng, shape)}
        if i % 5:
            envelope["value"] = _object(rng, i)  # a missing value is a tombstone
        envelope["metadata"] = {"timestamp": 5 + i, "topic": "users", "partition": 0, "offset": i}
        if seed == 1:
            envelope |= {"keyIsArray": False, "valueIsArray": False}
        envelopes.append(envelope)
    fast, slow = _both(LandingFormat.LENSES, [_lines(envelopes)], LENSES)
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize("headers", ["none", "records", "wrapped"])
@pytest.mark.parametrize("seed", range(3))
def test_confluent_files_column_wise_are_the_per_row_records(seed, headers):
    rng = random.Random(seed)
    n = rng.randrange(1, 300)
    values = [_object(rng, i) | {"kafka_offset": 100 + i, "kafka_ts": 7 * i} for i in range(n)]
    keys = [rng.choice([rng.choice(TEXTS), {"id": i}]) if seed == 2 else f"user-{i}" for i in range(n)]
    files = [_lines(values), _lines(keys)]
    if headers != "none":
        lists = [_headers(rng, "records") for _ in range(n)]
        files.append(_lines([{"headers": h} for h in lists] if headers == "wrapped" else lists))
    fast, slow = _both(LandingFormat.CONFLUENT, files, CONFLUENT)
    assert fast is not None or seed == 2  # keys of two types in one file: read row by row
    _pinned(fast, slow)


def test_confluent_tombstones_and_values_without_insert_fields():
    keys = _lines([f"k{i}" for i in range(20)])
    fast, slow = _both(LandingFormat.CONFLUENT, [keys], CONFLUENT, tombstone=True)
    assert fast is not None and fast.mtime_timestamps == 20
    _pinned(fast, slow)
    values = _lines(["text", "é", None, "x"])
    fast, slow = _both(LandingFormat.CONFLUENT, [values, _lines(["a", "b", "c", "d"])], CONFLUENT_PLAIN)
    assert fast is not None and fast.mtime_timestamps == 4
    _pinned(fast, slow)


def test_gzip_lines_are_read_column_wise():
    data = _lines([{"key": "a", "value": {"x": 1}, "offset": 0, "timestamp": 1}])
    fast, slow = _both(LandingFormat.AIVEN, [gzip.compress(data)], AIVEN)
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize("layout", ["one line", "a record a line", "indented"])
def test_aiven_json_arrays_column_wise_are_the_per_row_records(layout):
    rng = random.Random(len(layout))
    records = [_aiven_record(rng, i, "records", "objects") for i in range(120)]
    if layout == "one line":
        text = json.dumps(records)
    elif layout == "a record a line":
        text = "[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n]\n"
    else:
        text = json.dumps(records, indent=2)
    fast, slow = _both(LandingFormat.AIVEN, [text.encode()], AIVEN, kind=FileFormat.JSON)
    assert fast is not None and fast.where[0].endswith(": record 1")
    _pinned(fast, slow)


ODD_ARRAYS = ["[]", "{}", '[{"key":"a","value":1,"offset":0,"timestamp":1},]', "[1, 2]", "null", "[null]", "[] []", ""]


@pytest.mark.parametrize("text", ODD_ARRAYS, ids=range(len(ODD_ARRAYS)))
def test_json_arrays_the_columns_cannot_read_exactly_are_read_by_row(text):
    _pinned(*_both(LandingFormat.AIVEN, [text.encode()], AIVEN, kind=FileFormat.JSON))


def test_deep_nesting_is_read_by_row():
    deep = '{"a":' * 3000 + "1" + "}" * 3000
    text = '{"key":"k","value":' + deep + ',"offset":0,"timestamp":1}\n'
    assert json_rows.parse_lines(text.encode()) is None or _both(LandingFormat.AIVEN, [text.encode()], AIVEN)[0] is None


A = '{"key":"a","value":{"x":1},"offset":0,"timestamp":1'
ODD_AIVEN = [
    A + "}\n\n" + A + "}\n",  # a blank line: the rows are not the lines
    A + "}\n" + A + "}   \n  " + A + "}",
    A + "}\n  \n",
    A + ',"value":2}\n',  # a field given twice
    A + "}{}\n",
    A + "} garbage\n",
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":"2024-01-01T00:00:00Z"}\n',
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":"2024-01-01T00:00:01.500Z"}\n',
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":"yesterday"}\n',
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":"2024-13-01T00:00:00Z"}\n',
    '{"key":"a","value":{"x":1},"offset":true,"timestamp":1}\n',
    '{"key":"a","value":{"x":1},"offset":1.0,"timestamp":1}\n',
    '{"key":"a","value":{"x":1},"offset":99999999999999999999,"timestamp":1}\n',
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":[1]}\n',
    '{"key":"a","value":{"x":1.5},"offset":0,"timestamp":1}\n{"key":"a","value":{"x":1},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"x":1e2},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"x":99999999999999999999},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"x":NaN},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"x":null},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"x":1},"offset":0,"timestamp":1}\n{"key":"a","value":{},"offset":0,"timestamp":1}\n',
    '{"key":"a","value":{"d":"2024-01-01"},"offset":0,"timestamp":1}\n',
    '{"key":"2024-01-01 10:00:00","value":{"d":["2024-01-01T00:00:00Z"],"e":{"f":"2024-01-01"}},'
    '"offset":0,"timestamp":1}\n',
    '{"key":"a","value":[1,"a"],"offset":0,"timestamp":1}\n',
    '{"key":"a","value":"x","offset":0,"timestamp":1}\n{"key":"a","value":{"x":1},"offset":0,"timestamp":1}\n',
    '{"key":"\\ud800","value":"x","offset":0,"timestamp":1}\n',
    '{"key":"a\tb","value":"x","offset":0,"timestamp":1}\n',
    A + ',"headers":{"h":"v"}}\n',
    A + ',"headers":[["h",5]]}\n',
    A + ',"headers":[["h"]]}\n',
    A + ',"headers":[null]}\n',
    A + ',"headers":[{"value":"v"}]}\n',
    A + ',"headers":[{"key":null,"value":"v"}]}\n',
    A + ',"headers":[{"key":"h","value":1}]}\n',
    A + ',"headers":[{"key":"h","value":"v"}]}\n' + A + ',"headers":[{"name":"h","value":"v"}]}\n',
    A + ',"headers":"h"}\n',
    "[1,2]\n",
    "null\n",
    '"text"\n',
    "{}\n",
    A + "}\r\n" + A + "}\r\n",
    "\ufeff" + A + "}\n",
]


@pytest.mark.parametrize("text", ODD_AIVEN, ids=range(len(ODD_AIVEN)))
def test_aiven_lines_the_columns_cannot_read_exactly_are_read_by_row(text):
    _pinned(*_both(LandingFormat.AIVEN, [text.encode()], AIVEN))


def test_text_that_looks_like_a_date_is_read_column_wise_as_text():
    records = [
        {"key": "2024-01-01", "value": {"at": f"2024-01-0{1 + i % 9}T00:00:0{i % 10}Z", "d": ["2024-02-02"]},
         "offset": i, "timestamp": 1}
        for i in range(30)
    ]  # fmt: skip
    fast, slow = _both(LandingFormat.AIVEN, [_lines(records)], AIVEN)
    assert fast is not None
    _pinned(fast, slow)


@pytest.mark.parametrize(
    "stamp",
    [
        "2024-01-01T00:00:00Z",
        "2024-01-01T00:00:01.500Z",
        "2024-02-29T23:59:59.999+02:00",
        "2024-01-01",
        "2024-01-01 10:00:00",
    ],
)
def test_aiven_iso_timestamps_are_read_column_wise(stamp):
    records = [{"key": "a", "value": {"x": i}, "offset": i, "timestamp": stamp if i % 3 else None} for i in range(9)]
    fast, slow = _both(LandingFormat.AIVEN, [_lines(records)], AIVEN)
    assert fast is not None
    _pinned(fast, slow)


def test_text_that_is_not_utf8_is_read_by_row():
    data = b'{"key":"a","value":"\xff","offset":0,"timestamp":1}\n'
    fast, slow = _both(LandingFormat.AIVEN, [data], AIVEN)
    assert fast is None and "line 1" in slow


M = '"metadata":{"timestamp":1,"offset":0}'
ODD_LENSES = [
    '{"key":"YQ==","value":"x","keyIsArray":true,' + M + "}\n",
    '{"key":"a","value":"eA==","valueIsArray":true,' + M + "}\n",
    '{"key":"a","value":"x","keyIsArray":1,' + M + "}\n",
    '{"key":"a","value":"x"}\n',
    '{"key":"a","value":"x","metadata":null}\n',
    '{"key":"a","value":"x","metadata":{"timestamp":"1","offset":0}}\n',
    '{"key":"a","value":"x",' + M + '}\n{"key":"a","value":"x","metadata":5}\n',
    '{"key":"a","value":{"x":null},' + M + "}\n",
]


@pytest.mark.parametrize("text", ODD_LENSES, ids=range(len(ODD_LENSES)))
def test_lenses_envelopes_the_columns_cannot_read_exactly_are_read_by_row(text):
    _pinned(*_both(LandingFormat.LENSES, [text.encode()], LENSES))


ODD_CONFLUENT = [
    ('{"a":1,"kafka_offset":0}\n', '"k"\n'),  # no timestamp field: refused
    ('{"a":1,"kafka_offset":0,"kafka_ts":null}\n', '"k"\n'),
    ('{"a":1,"kafka_offset":null,"kafka_ts":1}\n', '"k"\n'),
    ('{"a":1,"kafka_offset":0,"kafka_ts":1}\n', '"k"\n"j"\n'),  # files of different lengths
    ('"text"\n', '"k"\n'),
    ("null\n", '"k"\n'),
    ('{"a":1,"kafka_offset":0,"kafka_ts":"2024-01-01T00:00:00Z"}\n', '"k"\n'),
    ('{"a":null,"kafka_offset":0,"kafka_ts":1}\n', '"k"\n'),
    ('{"a":1,"kafka_offset":0,"kafka_ts":1}\n', '{"id":null}\n'),
    ('{"a":1,"kafka_offset":0,"kafka_ts":1}\n', "\n"),
    ('{"kafka_offset":0,"kafka_ts":1}\n', '"k"\n'),
]


@pytest.mark.parametrize("files", ODD_CONFLUENT, ids=range(len(ODD_CONFLUENT)))
def test_confluent_files_the_columns_cannot_read_exactly_are_read_by_row(files):
    _pinned(*_both(LandingFormat.CONFLUENT, [f.encode() for f in files], CONFLUENT))


def test_a_malformed_line_is_named_by_the_ingestion(tmp_path, store):
    """Through the ingestion: the column-wise path declines and the refusal names the file, line and column."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    root = tmp_path / "landing"
    root.mkdir()
    good = [{"key": f"k{i}", "value": {"n": i}, "offset": i, "timestamp": 1} for i in range(3)]
    (root / "users-0-0.jsonl").write_bytes(_lines(good) + b'{"key": "k3", "value": {"n": 3}, "offset": 3,, }\n')
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": "aiven"}), landing_logs(str(root))[0]["users-0"])
    message = str(info.value)
    assert "users-0-0.jsonl: line 4: malformed JSON" in message and "column 46" in message and "\n" not in message
    assert not handle.exists()
