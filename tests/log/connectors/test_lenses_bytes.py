"""Lenses' envelopes whose keys or values are bytes (`keyIsArray` / `valueIsArray` true: base64 text) shaped
column by column (json_columns.lenses_json, parquet_columns.lenses_parquet, base64 decoded by
ingest/formats/base64_columns.py) give the very Columns the per-row shape gives, and step aside for every
envelope the per-row shape would refuse or read otherwise: pinned over random files as the sink writes them
(flags true, false, null or absent line by line; base64 of any bytes; nulls; every header shape) and over
odd and refused envelopes one by one."""

from __future__ import annotations

import base64
import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.debezium import apply_cdc
from compaction_assets.ingest.connectors.shaping import columns, parquet_columns, shapes
from compaction_assets.ingest.formats import readers
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat, LandingFormat
from tests.log.connectors.test_json_columns import LENSES, TEXTS, _both, _headers, _lines, _object, _pinned
from tests.log.connectors.test_vectorised import assert_same


def _b64(rng: random.Random) -> str:
    raw = rng.choice([bytes(rng.randrange(256) for _ in range(rng.randrange(40))), "é😀".encode(), b'{"a":1}', b""])
    return base64.b64encode(raw).decode()


def _flag(rng: random.Random, envelope: dict, name: str, flagged: bool) -> None:
    """The flag as the sink gives it: true when flagged, else false, null or left out."""
    if flagged:
        envelope[name] = True
    elif (choice := rng.randrange(3)) < 2:
        envelope[name] = [False, None][choice]


def _envelope(rng: random.Random, i: int, shape: str, values: str) -> dict:
    key_bytes = rng.random() < 0.7
    envelope: dict = {"key": _b64(rng) if key_bytes else rng.choice(TEXTS) + str(i)}
    _flag(rng, envelope, "keyIsArray", key_bytes)
    value_bytes = values == "bytes" and rng.random() < 0.7
    if i % 6 != 5:  # a missing value is a tombstone
        if values == "objects":
            envelope["value"] = _object(rng, i)
        else:
            envelope["value"] = _b64(rng) if value_bytes else rng.choice([*TEXTS, None])
    _flag(rng, envelope, "valueIsArray", value_bytes)
    envelope["headers"] = _headers(rng, shape)
    envelope["metadata"] = {"timestamp": 5 + i, "topic": "users", "partition": 0, "offset": i}
    return envelope


@pytest.mark.parametrize("values", ["bytes", "objects"])
@pytest.mark.parametrize("shape", ["records", "pairs", "empty"])
@pytest.mark.parametrize("seed", range(3))
def test_lenses_byte_envelopes_column_wise_are_the_per_row_records(seed, shape, values):
    rng = random.Random(seed)
    envelopes = [_envelope(rng, i, shape, values) for i in range(rng.randrange(1, 300))]
    fast, slow = _both(LandingFormat.LENSES, [_lines(envelopes)], LENSES)
    assert fast is not None
    _pinned(fast, slow)


M = '"metadata":{"timestamp":1,"offset":0}'
ODD = [
    '{"key":"YQ","keyIsArray":true,' + M + "}\n",  # not base64: refused
    '{"key":"a b=","keyIsArray":true,' + M + "}\n",
    '{"key":5,"keyIsArray":true,' + M + "}\n",
    '{"key":{"id":1},"keyIsArray":true,' + M + "}\n",
    '{"key":null,"keyIsArray":true,"value":null,"valueIsArray":true,' + M + "}\n",
    '{"key":"YQ==","keyIsArray":"true",' + M + "}\n",  # a flag that is not a boolean
    '{"key":"YQ==","keyIsArray":1,' + M + "}\n",
    '{"key":"YQ==","keyIsArray":0,' + M + "}\n",
    '{"key":"k","value":{"x":1},"valueIsArray":true,' + M + "}\n",
    '{"key":"k","value":"YR==","valueIsArray":true,' + M + "}\n",
    '{"key":"YQ==","keyIsArray":true,' + M + '}\n{"key":"not base64","keyIsArray":false,' + M + "}\n",
    '{"key":"YQ==","keyIsArray":true,' + M + '}\n{"key":"YQ","keyIsArray":true,' + M + "}\n",
    '{"key":"YQ==","keyIsArray":true,"value":"eA==","valueIsArray":true,"headers":{"h":"v"},' + M + "}\n",
]


@pytest.mark.parametrize("text", ODD, ids=range(len(ODD)))
def test_lenses_byte_envelopes_the_columns_cannot_read_exactly_are_read_by_row(text):
    fast, slow = _both(LandingFormat.LENSES, [text.encode()], LENSES)
    _pinned(fast, slow)
    assert (fast is not None) == (ODD.index(text) in {4, 9, 10}), "the columns take these odd files, and only these"


def test_byte_envelopes_with_change_events_are_refused_by_row():
    """Bytes are no change event: the per-row path refuses them, the columns step aside."""
    cfg = build_config({"landing.format": "lenses", "cdc.format": "debezium"}).landing
    text = '{"key":"k","value":"eA==","valueIsArray":true,' + M + "}\n"
    fast, _ = _both(LandingFormat.LENSES, [text.encode()], cfg)
    raw = shapes.lenses(readers.read_rows(text.encode(), FileFormat.JSONL, "f.json"), "f.json")
    with pytest.raises(InvalidInputError, match="not a Debezium change event"):
        apply_cdc(raw, cfg)
    assert fast is None


def test_lenses_parquet_byte_envelopes_are_the_per_row_records(tmp_path):
    rng = random.Random(3)
    envelopes = [_envelope(rng, i, "empty", "bytes") for i in range(200)]
    for e in envelopes:
        e.pop("headers")
        e.setdefault("value", None)
        e.setdefault("keyIsArray", None)
        e.setdefault("valueIsArray", None)
    path = tmp_path / "000000000199_1_2.parquet"
    pq.write_table(pa.Table.from_pylist(envelopes), path)
    table = pq.read_table(path)
    name = str(path)
    fast = parquet_columns.lenses_parquet(table, name)
    slow = columns.from_raw(shapes.lenses(readers.Rows(table.to_pylist(), "record", list(range(1, 201))), name), name)
    assert_same(fast, slow)


def test_a_bad_base64_key_is_named_by_the_ingestion(tmp_path, store):
    """Through the ingestion: the column-wise path declines and the refusal names the file and line."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    part = tmp_path / "landing" / "users" / "0"
    part.mkdir(parents=True)
    good = [
        {"key": "YQ==", "keyIsArray": True, "value": "x", "metadata": {"timestamp": 1, "offset": i}} for i in range(3)
    ]
    bad = {"key": "YQ=", "keyIsArray": True, "value": "x", "metadata": {"timestamp": 1, "offset": 3}}
    (part / "000000000003_1_1.json").write_text("".join(json.dumps(e) + "\n" for e in [*good, bad]))
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(
            handle, build_config({"landing.format": "lenses"}), landing_logs(str(tmp_path / "landing"))[0]["users-0"]
        )
    message = str(info.value)
    assert "000000000003_1_1.json: line 4: key: invalid base64" in message and "\n" not in message
    assert not handle.exists()
