"""Aiven's CSV read by pyarrow's CSV reader and shaped column by column (ingest/connectors/shaping/csv_columns.py,
ingest/formats/base64_columns.py) gives the very Columns the per-row shape gives (stored keys and values,
offsets, timestamps, headers, value schema, the line each row names), and steps aside for every file the
per-row shape would refuse or read otherwise: pinned over random files as the sink writes them (base64 of any
bytes, empty cells, 64-bit edges, CRLF, gzip, fewer or more fields) and over odd and refused files one by one."""

from __future__ import annotations

import base64
import binascii
import csv
import gzip
import random
import re

import pyarrow as pa
import pytest

from compaction_assets.errors import ConfigError, InvalidInputError
from compaction_assets.ingest.connectors.layouts import LandedFile, Unit
from compaction_assets.ingest.connectors.registry import connector_for
from compaction_assets.ingest.connectors.shaping import columns, csv_columns
from compaction_assets.ingest.formats import base64_columns, readers
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat, LandingFormat
from tests.log.connectors.sinks import b64
from tests.log.connectors.test_vectorised import assert_same

AIVEN = build_config({"landing.format": "aiven"}).landing
NAME = "s3://b/users-0-0.csv"
EDGES = [0, 1, -1, 2**63 - 1, -(2**63), 1_700_000_000_000]


def _both(data: bytes, cfg=AIVEN):
    """(the column-wise Columns or None, the per-row Columns or the per-row refusal's text)."""
    connector = connector_for(LandingFormat.AIVEN)
    unit = Unit(NAME, (LandedFile(NAME, NAME, 0),), 0)
    cells = csv_columns.parse_csv(data)
    fast = None if cells is None else connector.csv_columns([cells], unit, NAME, cfg)
    try:
        rows = readers.read_rows(data, FileFormat.CSV, NAME)
        slow: columns.Columns | str = columns.from_raw(
            connector.raw_records([rows], [FileFormat.CSV], [NAME], unit, cfg), NAME
        )
    except InvalidInputError as exc:
        slow = f"refused: {exc}"
    return fast, slow


def _pinned(fast, slow) -> None:
    if isinstance(slow, str):
        assert fast is None, slow
    elif fast is not None:
        assert_same(fast, slow)


def _cell(rng: random.Random) -> str:
    """A key or value as the sink writes it: base64 of any bytes, or nothing (null)."""
    if rng.random() < 0.1:
        return ""
    raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
    return b64(rng.choice([raw, "é日本\U0001f600".encode()[: rng.randrange(12)], b'{"a":1}', b"\x00\xff"]))


def _file(rng: random.Random, fields: int, newline: str) -> bytes:
    lines = []
    for i in range(rng.randrange(1, 400)):
        cells = [_cell(rng), _cell(rng), str(rng.choice([*EDGES, i])), str(rng.choice([*EDGES, i]))]
        if fields == 1 and not cells[0]:
            cells[0] = b64(b"k")  # a line of one empty cell is a blank line (the columns leave it to the rows)
        cells += ["x"] * (fields - 4) if fields > 4 else []
        lines.append(",".join(cells[:fields]) if rng.random() > 0.02 else "")  # a blank line: empty cells
    return (newline.join(lines) + (newline if rng.random() < 0.8 else "")).encode()


@pytest.mark.parametrize("fields", [4, 2, 1, 5])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("seed", range(3))
def test_aiven_csv_column_wise_is_the_per_row_records(seed, newline, fields):
    data = _file(random.Random(seed), fields, newline)
    fast, slow = _both(data)
    assert fast is not None
    _pinned(fast, slow)
    fast, slow = _both(gzip.compress(data))
    assert fast is not None
    _pinned(fast, slow)


K, V = b64(b"k"), b64(b"value")
ODD_CSV = [
    f"YQ,{V},0,1\n",  # not base64: refused
    f"a b=,{V},0,1\n",
    f"YQ==YQ==,{V},0,1\n",
    f"Y===,{V},0,1\n",
    f"YR==,{V},0,1\n",  # non-zero bits past the last byte: read as the decoder reads them
    f"{K},YWJj\n,{V},0,1\n",
    f"{K},{V},1.0,1\n",
    f"{K},{V}, 1,1\n",
    f"{K},{V},+1,1\n",
    f"{K},{V},1_0,1\n",
    f"{K},{V},007,-0\n",
    f"{K},{V},99999999999999999999,1\n",
    f"{K},{V},\u0663,1\n",
    f'"{K}",{V},0,1\n',
    f'{K},"{V}",0,"1"\n',
    f"{K},{V},0,1\n\n{K},{V},1,2\n",
    f"\n{K},{V},0,1\n",
    f"{K},{V},0,1\n\n\n",
    f"{K},{V},0,1\n{K},{V}\n",
    f"\ufeff{K},{V},0,1\n",
    f"{K},{V},0,1,\xff\n",
    f"{K},{V},0,1\x00\n",
    f"{K},{V},0,1\r{K},{V},1,2\r",
    f"{K},{V},0,1,{'x' * 131072}\n",
    f"{K},{'QUFB' * 40000},0,1\n",
    "",
    "\n",
    "key,value,offset,timestamp\n",
    f"{K}\n",
    ",,,\n",
    f"{K},{V},0,1,,,\n",
]


@pytest.mark.parametrize("text", ODD_CSV, ids=range(len(ODD_CSV)))
def test_aiven_csv_the_columns_cannot_read_exactly_are_read_by_row(text):
    data = text.encode("utf-8") if "\xff" not in text else text.encode("latin-1")
    fast, slow = _both(data)
    _pinned(fast, slow)
    assert (fast is not None) == (text in TAKEN), "the columns take these odd files, and only these"


TAKEN = {
    f"YR==,{V},0,1\n",
    f"{K},{V},007,-0\n",
    f"{K}\n",
    ",,,\n",
    f"{K},{V},0,1,,,\n",
    # a blank line: a record of empty cells, in the rows (one, the others missing) as in pyarrow's reader
    # (each cell empty)
    f"{K},{V},0,1\n\n{K},{V},1,2\n",
    f"{K},{V},0,1\n\n\n",
    "\n",
}


def test_corrupt_gzip_is_read_by_row():
    fast, slow = _both(gzip.compress(f"{K},{V},0,1\n".encode())[:-6])
    assert fast is None and isinstance(slow, str)


def test_csv_with_change_events_is_read_by_row():
    cfg = build_config({"landing.format": "aiven", "cdc.format": "debezium"}).landing
    assert _both(f"{K},,0,1\n".encode(), cfg)[0] is None


def test_base64_columns_are_the_per_row_decoders():
    rng = random.Random(7)
    texts = [
        None if rng.random() < 0.1 else b64(bytes(rng.randrange(256) for _ in range(rng.randrange(30))))
        for _ in range(3000)
    ]
    texts += ["YR==", "YWI=", "", "+/+/", "////"]
    arr = pa.array(texts, pa.string())
    expected = [None if t is None else base64.b64decode(t, validate=True) for t in texts]
    assert base64_columns.decode(arr).to_pylist() == expected
    assert base64_columns.decode(arr.slice(11, 700)).to_pylist() == expected[11:711]
    for bad in [
        "YQ",
        "YQ=",
        "Y",
        "a b=",
        "YQ==YQ==",
        "====",
        "YQ==\n",
        "é",
        "A=A=",
        "=AAA",
        "AA=A",
        "A===",
        "YQ==\x00",
    ]:
        with pytest.raises((binascii.Error, ValueError)):
            base64.b64decode(bad, validate=True)
        assert base64_columns.decode(pa.array(["YQ==", bad])) is None


def test_base64_columns_take_the_strict_form_alone_as_the_decoder_decodes_it():
    """Text of whole quads from the alphabet and `=` anywhere: decoded where it is in the strict form, as the
    per-row decoder decodes it; declined (None) otherwise, which covers all the decoder refuses (and a few
    it takes: Python 3.11's takes `=` after a whole quad, `A/g+====`); one value at a time and in one column."""
    rng = random.Random(5)
    texts = ["".join(rng.choice("AQYgw/+9=") for _ in range(4 * rng.randrange(0, 4))) for _ in range(4000)]
    strict = [t for t in texts if re.fullmatch(base64_columns.STRICT, t)]
    for text in texts:
        decoded = base64_columns.decode(pa.array(["QUJD", text, "QQ=="]))
        if text in strict:
            assert decoded.to_pylist() == [b"ABC", base64.b64decode(text, validate=True), b"A"], text
        else:
            assert decoded is None, text
    assert len(strict) > 1000
    assert base64_columns.decode(pa.array(strict)).to_pylist() == [base64.b64decode(t, validate=True) for t in strict]


def test_base64_columns_with_empty_as_null_over_slices_and_nulls():
    rng = random.Random(11)
    texts = [
        rng.choice([None, "", b64(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20))))]) for _ in range(900)
    ]
    arr = pa.array(texts, pa.string())
    for start, length in [(0, 900), (1, 500), (333, 7), (899, 1), (5, 0)]:
        expected = [base64.b64decode(t, validate=True) if t else None for t in texts[start : start + length]]
        assert base64_columns.decode(arr.slice(start, length), True).to_pylist() == expected
    assert base64_columns.decode(pa.array(["", None, ""]), True).to_pylist() == [None, None, None]
    assert base64_columns.decode(pa.array(["", None, ""])).to_pylist() == [b"", None, b""]


def test_integer_cells_over_slices():
    cells = pa.array(["7", "", "-12", "9223372036854775807", "", "-9223372036854775808", "0"], pa.string())
    values = [7, None, -12, 2**63 - 1, None, -(2**63), 0]
    for start in range(len(values)):
        assert csv_columns._longs(cells.slice(start), len(values) - start).to_pylist() == values[start:]
    for bad in ["-", "1-", "--1", "+1", " 1", "0x1", "1e3", "9223372036854775808", "\u0663"]:
        assert csv_columns._longs(pa.array(["1", bad]), 2) is None, bad


def test_a_bad_cell_is_named_by_the_ingestion(tmp_path, store):
    """Through the ingestion: the column-wise path declines and the refusal names the file and line."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    root = tmp_path / "landing"
    root.mkdir()
    good = "".join(f"{b64(f'k{i}'.encode())},{V},{i},{i}\n" for i in range(3))
    (root / "users-0-0.csv").write_text(good + f"{K},{V},3,yesterday\n")
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": "aiven"}), landing_logs(str(root))[0]["users-0"])
    message = str(info.value)
    assert "users-0-0.csv: line 4: offset and timestamp must be integers" in message and "\n" not in message
    assert not handle.exists()
    assert csv.field_size_limit() == 131072  # the limit the odd files above are written against


def test_a_blank_line_is_a_record_not_skipped(tmp_path, store):
    """A blank line is a record of one empty field (the csv module yields no cells for it); skipped, the
    records after it would take its place and a sink's null-only record (a tombstone) would be lost. Here
    it takes offset 1, so the next line's offset 1 is refused, naming that line, and nothing is written."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    root = tmp_path / "landing"
    root.mkdir()
    (root / "users-0-0.csv").write_text(f"{K},{V},0,1\n\n{K},{V},1,2\n")
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": "aiven"}), landing_logs(str(root))[0]["users-0"])
    assert "users-0-0.csv: line 3: offset 1 is below the next offset 2" in str(info.value), str(info.value)
    assert not handle.exists()


CSV_OF_NO_SINK = [
    (
        "confluent",
        {"users/partition=0/users+0+0000000000.csv": "a,1\n", "users/partition=0/users+0+0000000000.keys.csv": "k\n"},
        "users+0+0000000000.csv: Confluent's S3 sink writes no CSV",
    ),
    (
        "lenses",
        {"users/0/000000000000_1_1.csv": "name,age\nalice,3\n"},
        "000000000000_1_1.csv: Lenses' S3 sink writes CSV only",
    ),
]


@pytest.mark.parametrize("landing_format, files, refusal", CSV_OF_NO_SINK, ids=["confluent", "lenses"])
def test_csv_of_a_connector_that_writes_none_is_refused_naming_the_file(
    tmp_path, store, landing_format, files, refusal
):
    """Confluent's S3 sink has no CSV format and Lenses' writes CSV only without the envelope (no key, no
    offset): a `.csv` file in their layouts is refused in one line naming it, nothing written (before, a
    Confluent `.csv` unit landed its cells as JSON arrays: key `["k"]`, value `["a","1"]`)."""
    from compaction_assets.ingest.landing import ingest, landing_logs

    root = tmp_path / "landing"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": landing_format}), landing_logs(str(root))[0]["users-0"])
    assert refusal in str(info.value) and "\n" not in str(info.value), str(info.value)
    assert not handle.exists()


@pytest.mark.parametrize("landing_format", ["native", "confluent", "lenses"])
def test_landing_file_format_csv_needs_aiven(landing_format):
    with pytest.raises(ConfigError) as info:
        build_config({"landing.format": landing_format, "landing.file.format": "csv"}, "users")
    assert "landing.file.format='csv': needs landing.format aiven" in str(info.value)
    assert build_config({"landing.format": "aiven", "landing.file.format": "csv"}).landing.file_format is FileFormat.CSV
