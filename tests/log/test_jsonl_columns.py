"""Native JSON Lines read column-wise (ingest/formats/jsonl_columns.py) give the very table the per-record path
gives, and any file the columns cannot read exactly goes to the per-record path, whose errors name the
file and line: pinned over random files and over every shape the per-record path refuses."""

from __future__ import annotations

import json
import random

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.input_files import read_jsonl, read_jsonl_records
from compaction_assets.ingest.formats.jsonl_columns import read_columns

TEXTS = ["", "a", "é", "日本語", "\U0001f600", "tab\there", 'quote"s', "back\\slash", "nul\x00", "x" * 300]


def _record(rng: random.Random, n: int) -> dict:
    record: dict = {"key": rng.choice(TEXTS) + str(n % 50), "value": rng.choice([*TEXTS, None, '{"a": [1, 2.5]}'])}
    if rng.random() < 0.9:
        record["timestamp"] = rng.choice([0, 1, 2**63 - 1, rng.randrange(2**41)])
    if rng.random() < 0.3:
        record["offset"] = n
    if rng.random() < 0.5:
        record["headers"] = rng.choice(
            [[], None, [["h", "v"]], [["h", None], ["h", "é"]], [["", ""]], [["a", "1"], ["a", "2"], ["b", "x" * 50]]]
        )
    return record


def _outcome(read, data: bytes, path: str):
    try:
        return read(data, path)
    except InvalidInputError as exc:
        return f"refused: {exc}"


def _both(tmp_path, data: bytes):
    path = tmp_path / "in.jsonl"
    path.write_bytes(data)
    fast = _outcome(lambda d, p: read_jsonl(p), data, str(path))
    slow = _outcome(read_jsonl_records, data, str(path))
    return fast, slow


@pytest.mark.parametrize("seed", range(8))
def test_random_files_read_column_wise_are_the_records_table(tmp_path, seed):
    rng = random.Random(seed)
    records = [_record(rng, n) for n in range(rng.randrange(1, 400))]
    data = "".join(json.dumps(r, ensure_ascii=rng.random() < 0.5) + "\n" for r in records).encode()
    assert read_columns(data) is not None  # every shape here is the fast path's
    fast, slow = _both(tmp_path, data)
    assert not isinstance(slow, str) and fast.equals(slow)


REFUSED_OR_ODD = [
    b'{"key":"a","value":5,"timestamp":1}\n',
    b'{"key":"a","value":"x","timestamp":1.5}\n',
    b'{"key":"a","value":"x","timestamp":"1"}\n',
    b'{"key":"a","value":"x","timestamp":true}\n',
    b'{"key":"a","value":"x","timestamp":99999999999999999999}\n',
    b'{"key":"a","value":"x","timestamp":1,"zzz":1}\n',
    b'{"key":"a","value":"x","timestamp":1}\n\n{"key":"b","value":"y","timestamp":1}\n',
    b'{"key":"a","value":"x","timestamp":1}\n  \n{"key":"b","value":"y","timestamp":1}',
    b'  {"key":"a","value":"x","timestamp":1}\n',
    b'{"key":"a","key":"b","value":"x","timestamp":1}\n',
    b'{"key":"\\ud800","value":"x","timestamp":1}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":[["h",5]]}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":[["h",{"b64":"AA=="}]]}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":{"h":"v"}}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":[["h","v","w"]]}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":[[null,"v"]]}\n',
    b'{"key":"a","value":"x","timestamp":1,"headers":[null]}\n',
    b"[1,2]\n",
    b"{}\n",
    b'{"key":"a","value":"x","timestamp":1}{"key":"b","value":"x","timestamp":1}\n',
    b'{"key":"a","value":"\xff","timestamp":1}\n',
    b'{"key":"a","value":"x","timestamp":1} garbage\n',
    b'{"key":"a","value":"x","timestamp":1}\r\n{"key":"b","value":null,"timestamp":1}\r\n',
    b'{"key":"a","timestamp":1}\n',
    b'{"key":"a","value":null,"timestamp":1}\n{"key":"b","timestamp":1}\n',
    b'{"key":"a","value" : null,"timestamp":1}\n{"key":"b","value":"x","timestamp":1}\n',
    b'{"key":"value","value":null,"timestamp":1}\n{"key":"b","value":"\\"value\\":","timestamp":1}\n',
    b'{"key":null,"value":"x","timestamp":1}\n',
    b'{"value":"x","timestamp":1}\n',
    b'{"key":"a","key_b64":null,"value":"x","timestamp":1}\n',
    b'{"key_b64":"YQ==","value_b64":"/w==","timestamp":1}\n',
    b'{"key":"a","value":"x","timestamp":NaN}\n',
    b'{"key":"a","value":"x","timestamp":-5}\n',
    b'{"key":"a\tb","value":"x","timestamp":1}\n',
    b'{"key":"a","value":"x"}\n',
    b'{"key":"a","value":"x","timestamp":1,"offset":-0}\n',
    b"\n",
    b"",
]


@pytest.mark.parametrize("data", REFUSED_OR_ODD, ids=range(len(REFUSED_OR_ODD)))
def test_files_the_columns_cannot_read_exactly_give_the_per_record_outcome(tmp_path, data):
    fast, slow = _both(tmp_path, data)
    if isinstance(slow, str):
        assert fast == slow  # the same refusal, naming the same line
    else:
        assert not isinstance(fast, str) and fast.equals(slow)


def test_line_numbers_are_the_records_lines(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"key":"a","value":"x","timestamp":1}\n{"key":"b","value":null,"timestamp":2}\n')
    lines: list[int] = []
    assert len(read_jsonl(path, lines)) == 2 and lines == [1, 2]
