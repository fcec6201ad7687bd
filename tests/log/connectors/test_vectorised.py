"""The column-by-column Parquet shapes store exactly the bytes the per-row shapes store: same keys, values
(canonical JSON), offsets, timestamps, headers, value schema and error positions, on awkward values."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets.ingest.connectors.shaping import columns, parquet_columns, shapes
from compaction_assets.ingest.formats import arrowschema, canonical, readers
from compaction_assets.ingest.formats.arrowjson import encode_column, to_json
from compaction_assets.topics.config import build_config
from compaction_assets.topics.landing_settings import FileFormat

UTC = dt.timezone.utc
TEXTS = ["plain", "", 'quote " and \\ backslash', "line\nbreak\ttab\x01ctl", "ünïcödé ✓ 😀", "\u2028 sep", None]
ADDRESS = pa.struct([("zip", pa.string()), ("geo", pa.struct([("lat", pa.float64()), ("lon", pa.float64())]))])
VALUE = pa.struct(
    [
        ("email", pa.string()),
        ("n", pa.int64()),
        ("small", pa.int8()),
        ("big", pa.uint64()),
        ("ok", pa.bool_()),
        ("score", pa.float64()),
        ("raw", pa.binary()),
        ("price", pa.decimal128(10, 2)),
        ("seen", pa.timestamp("ms", tz="UTC")),
        ("born", pa.date32()),
        ("address", ADDRESS),
        ("tags", pa.list_(pa.string())),
        ("points", pa.list_(pa.struct([("x", pa.int32()), ("label", pa.string())]))),
        ("attrs", pa.map_(pa.string(), pa.string())),
        ("Zfirst", pa.string()),
        ("é", pa.int32()),
    ]
)


def awkward_value(i: int) -> dict | None:
    """Row i: each field takes its null, empty, nested, unicode and edge forms in turn."""
    if i % 11 == 10:
        return None
    return {
        "email": TEXTS[i % len(TEXTS)],
        "n": None if i % 5 == 3 else -i * 10**12,
        "small": -128 + i,
        "big": 2**63 + i if i % 4 == 0 else i,
        "ok": None if i % 3 == 2 else bool(i % 2),
        "score": [0.1, -0.0, 1e300, 3.0, None, 2.5e-8][i % 6],
        "raw": [b"\x00\xff", b"", None][i % 3],
        "price": [decimal.Decimal("12.30"), decimal.Decimal("-0.01"), None][i % 3],
        "seen": None if i % 4 == 1 else dt.datetime(2024, 2, 29, 23, 59, 59, 123000, tzinfo=UTC),
        "born": [dt.date(1970, 1, 1), None][i % 2],
        "address": [None, {"zip": "75001", "geo": None}, {"zip": None, "geo": {"lat": 48.85, "lon": 2.35}}][i % 3],
        "tags": [None, [], ["a", None, 'b"'], ["😀"]][i % 4],
        "points": [[{"x": 1, "label": "one"}, None, {"x": None, "label": "\\"}], None, []][i % 3],
        "attrs": [None, [("k", "v")], []][i % 3],
        "Zfirst": "Z",
        "é": i,
    }


def rows(n: int) -> list[dict | None]:
    return [awkward_value(i) for i in range(n)]


def per_row(batch: shapes.RawBatch, label: str) -> columns.Columns:
    return columns.from_raw(batch, label)


def assert_same(fast: columns.Columns, slow: columns.Columns) -> None:
    assert fast is not None, "the vectorised shape declined these values"
    assert fast.table().to_pylist() == slow.table().to_pylist()
    assert fast.table().equals(slow.table())
    assert fast.structured.to_pylist() == slow.structured.to_pylist()
    assert fast.mtime_timestamps == slow.mtime_timestamps
    assert [fast.where[i] for i in range(len(fast))] == [slow.where[i] for i in range(len(slow))]
    a, b = columns.value_schema(fast), canonical.infer_schema(slow.values, slow.structured)
    assert (a is None and b is None) or a.schema.equals(b.schema)


def test_canonical_json_of_columns_is_the_per_row_encoders():
    arr = pa.array(rows(44), VALUE)
    assert to_json(arr).to_pylist() == [
        None if v is None else canonical.canonical_json(v).decode() for v in arr.to_pylist()
    ]


def test_struct_children_null_only_under_a_null_struct_are_joined_as_the_per_row_encoder_writes():
    """The fast path (children null only where their struct is: joined without `null` fills or a final
    mask) against the general one (values under a null struct row, nulls in valid rows), same JSON."""
    email = pa.array(["a@x", None, 'q"\\', "ü", None, "d"])
    n = pa.array([1, None, 3, None, 5, 6], pa.int64())
    ok = pa.array([True, None, False, True, None, None])
    mask = pa.array([False, True, False, False, True, False])
    cases = {
        "nulls only under the struct": pa.StructArray.from_arrays([email, n, ok], ["email", "n", "ok"], mask=mask),
        "values under a null struct": pa.StructArray.from_arrays(
            [pa.array(["a", "b", "c", "d", "e", "f"]), n.fill_null(0), ok], ["email", "n", "ok"], mask=mask
        ),
        "nulls in valid rows": pa.StructArray.from_arrays(
            [email, n, ok], ["email", "n", "ok"], mask=pa.array([True, False, False, False, False, False])
        ),
        "no struct nulls": pa.StructArray.from_arrays([email, n, ok], ["email", "n", "ok"]),
    }
    for label, arr in cases.items():
        expected = [None if v is None else canonical.canonical_json(v).decode() for v in arr.to_pylist()]
        assert to_json(arr).to_pylist() == expected, label
    parquet_read = roundtrip_array(cases["values under a null struct"])
    assert to_json(parquet_read).to_pylist() == to_json(cases["values under a null struct"]).to_pylist()


def roundtrip_array(arr: pa.Array) -> pa.Array:
    """An array through a Parquet file in memory (a null struct's children come back null)."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"v": arr}), sink)
    return pq.read_table(pa.BufferReader(sink.getvalue())).column("v").combine_chunks()


SAID = {"email", "n", "small", "ok", "score", "raw", "price", "address", "tags", "points", "Zfirst", "é"}


def assert_schema_said_or_left(arr: pa.Array, said: bool) -> None:
    """The schema read off the Arrow type is the JSON-inferred one, or UNKNOWN (inferred from the JSON)."""
    got = arrowschema.value_schema(arr)
    expected = canonical.infer_schema(*encode_column(arr))
    assert (got is not arrowschema.UNKNOWN) == said, arr.type
    if said:
        assert (got is None and expected is None) or got.schema.equals(expected.schema), (arr.type, got, expected)


def test_value_schema_from_the_arrow_types_is_the_one_inferred_from_the_json():
    data = rows(44)
    for field in VALUE:
        one = pa.struct([field])
        assert_schema_said_or_left(
            pa.array([None if v is None else {field.name: v[field.name]} for v in data], one), field.name in SAID
        )
        assert_schema_said_or_left(pa.array([None if i % 3 else {field.name: None} for i in range(44)], one), True)
    said = pa.struct([f for f in VALUE if f.name in SAID])
    assert_schema_said_or_left(pa.array([None if v is None else {k: v[k] for k in SAID} for v in data], said), True)
    assert_schema_said_or_left(pa.array(data, VALUE), False)  # dates, timestamps, maps, a uint64 past int64
    assert_schema_said_or_left(pa.array([{"big": 2**63 - 1}, {"big": 3}], pa.struct([("big", pa.uint64())])), True)
    assert_schema_said_or_left(pa.array([{"d": "2024-02-29"}, {"d": "x"}]), False)  # a date-like text
    assert_schema_said_or_left(pa.array([{"d": "2024-02-29T10:00:00Z"}, {"d": None}]), False)
    assert_schema_said_or_left(pa.array([{"d": "20240229 10"}, {"d": "2024-02-2"}, {"d": "x 2024-02-29"}]), True)
    assert_schema_said_or_left(pa.array([None, None], VALUE), True)
    assert_schema_said_or_left(pa.array(["text", None]), True)
    assert_schema_said_or_left(pa.array([{}, {}], pa.struct([])), False)


def test_value_schema_from_the_arrow_types_over_several_json_blocks():
    n = 40_000  # over 1 MiB of JSON: the reader infers block by block; the values come in the last one
    typ = pa.struct([("a", pa.int32()), ("l", pa.list_(pa.int64())), ("pad", pa.string())])
    values = [{"a": None if i < n - 5 else i, "l": [] if i < n - 3 else [i], "pad": "p" * 40} for i in range(n)]
    assert_schema_said_or_left(pa.array(values, typ), True)


def roundtrip(tmp_path, table: pa.Table, name: str) -> pa.Table:
    """The table as a Parquet file written by pyarrow and read back (the connectors' physical types)."""
    pq.write_table(table, str(tmp_path / name), compression="snappy")
    return readers.read_table((tmp_path / name).read_bytes(), name)


def test_aiven_parquet_column_by_column_equals_row_by_row(tmp_path):
    n = 44
    keys = [None if i == 5 else ({"id": i, "region": TEXTS[i % 6]} if i % 2 else f"user-{i}") for i in range(n)]
    struct_keys = pa.array(
        [k if isinstance(k, dict) else None for k in keys], pa.struct([("id", pa.int64()), ("region", pa.string())])
    )
    for key_col in (pa.array([k if isinstance(k, str) else None for k in keys]), struct_keys):
        table = pa.table(
            {
                "key": key_col,
                "value": pa.array(rows(n), VALUE),
                "offset": pa.array(range(100, 100 + n), pa.int64()),
                "timestamp": pa.array([None if i == 7 else 1_700_000_000_000 + i for i in range(n)]),
                "headers": pa.array(
                    [None if i % 3 == 0 else [("trace", f"t{i}"), ("é", "✓")] for i in range(n)],
                    pa.map_(pa.string(), pa.string()),
                ),
            }
        )
        table = roundtrip(tmp_path, table, "t-0-100.parquet")
        fast = parquet_columns.aiven_parquet(table, "s3://b/t-0-100.parquet")
        slow = per_row(
            shapes.aiven(
                readers.Rows(table.to_pylist(), "record", list(range(1, n + 1))),
                FileFormat.PARQUET,
                "s3://b/t-0-100.parquet",
            ),
            "s3://b/t-0-100.parquet",
        )
        assert_same(fast, slow)


def test_lenses_parquet_column_by_column_equals_row_by_row(tmp_path):
    n = 39
    meta = pa.struct(
        [("timestamp", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())]
    )
    for key_col in (
        pa.array([None if i == 3 else f"user-{i % 9}" for i in range(n)]),
        pa.array([{"id": i % 9, "region": TEXTS[i % 6]} for i in range(n)]),
    ):
        table = pa.table(
            {
                "key": key_col,
                "value": pa.array(rows(n), VALUE),
                "headers": pa.array(
                    [[] if i % 4 == 0 else [("trace", f"t{i}"), ("é", None)] for i in range(n)],
                    pa.map_(pa.string(), pa.string()),
                ),
                "metadata": pa.array(
                    [
                        {
                            "timestamp": None if i == 6 else 1_700_000_000_000 + i,
                            "topic": "t",
                            "partition": 0,
                            "offset": 500 + i,
                        }
                        for i in range(n)
                    ],
                    meta,
                ),
            }
        )
        name = "s3://b/landing/t/0/000000000538_1_39.parquet"
        table = roundtrip(tmp_path, table, "000000000538_1_39.parquet")
        fast = parquet_columns.lenses_parquet(table, name)
        slow = per_row(shapes.lenses(readers.Rows(table.to_pylist(), "record", list(range(1, n + 1))), name), name)
        assert_same(fast, slow)
    # envelopes without a value column are tombstones, as the rows read a missing value
    keys_only = roundtrip(tmp_path, table.drop_columns(["value"]), "keys-only.parquet")
    as_rows = readers.Rows(keys_only.to_pylist(), "record", list(range(1, n + 1)))
    assert_same(parquet_columns.lenses_parquet(keys_only, name), per_row(shapes.lenses(as_rows, name), name))


@pytest.mark.parametrize(
    "fields", [{}, {"landing.offset.field": "kafka_offset", "landing.timestamp.field": "kafka_ts"}]
)
def test_confluent_parquet_column_by_column_equals_row_by_row(tmp_path, fields):
    n = 33
    values = [v or awkward_value(0) for v in rows(n)]  # a Confluent value row is never null (tombstones aside)
    table = pa.Table.from_pylist(values, pa.schema(list(VALUE)))
    if fields:
        table = table.append_column("kafka_offset", pa.array(range(n), pa.int64()))
        table = table.append_column("kafka_ts", pa.array([None if i == 4 else 1_700_000_000_000 + i for i in range(n)]))
    keys = pa.table({"key": pa.array([{"id": i, "t": TEXTS[i % 6]} for i in range(n)])})
    headers = pa.table(
        {"headers": pa.array([[{"key": "h", "value": None if i % 2 else f"v{i}"}] if i % 3 else [] for i in range(n)])}
    )
    tables = [roundtrip(tmp_path, t, f"{i}.parquet") for i, t in enumerate((table, keys, headers))]
    cfg = build_config({"landing.format": "confluent", **fields}).landing
    names = ["s3://b/topics/t/partition=0/t+0+0000000000.snappy.parquet", "keys", "headers"]
    fast = parquet_columns.confluent_parquet(*tables, names[0], cfg, 1_600_000_000_000)
    as_rows = [readers.Rows(t.to_pylist(), "record", list(range(1, n + 1))) for t in tables]
    slow = per_row(shapes.confluent(*as_rows, names, [FileFormat.PARQUET] * 3, cfg, 1_600_000_000_000), names[0])
    assert_same(fast, slow)
    tomb_fast = parquet_columns.confluent_parquet(None, tables[1], None, names[0], cfg, 1_600_000_000_000)
    tomb_slow = per_row(
        shapes.confluent(None, as_rows[1], None, names, [FileFormat.PARQUET], cfg, 1_600_000_000_000), names[0]
    )
    assert_same(tomb_fast, tomb_slow)


def test_what_the_columns_cannot_take_exactly_is_left_to_the_rows(tmp_path):
    nan = pa.table({"key": ["k"], "value": pa.array([{"x": float("nan")}]), "offset": [0], "timestamp": [1]})
    assert parquet_columns.aiven_parquet(nan, "f") is None  # refused row by row, naming the record
    text_offset = pa.table({"key": ["k"], "value": ["v"], "offset": ["0"], "timestamp": [1]})
    assert parquet_columns.aiven_parquet(text_offset, "f") is None
    cfg = build_config({"landing.format": "confluent", "landing.offset.field": "absent"}).landing
    assert parquet_columns.confluent_parquet(pa.table({"a": [1]}), pa.table({"key": ["k"]}), None, "f", cfg, 0) is None
    envelope = {"key": ["k"], "value": ["dg=="], "metadata": pa.array([{"offset": 0, "timestamp": 1}])}
    assert parquet_columns.lenses_parquet(pa.table(envelope), "f") is not None
    flagged = parquet_columns.lenses_parquet(pa.table({**envelope, "valueIsArray": [True]}), "f")
    assert flagged is not None and flagged.values.to_pylist() == [b"v"]  # base64 of bytes, decoded
    byte_key = pa.table({**envelope, "key": pa.array([b"k"]), "keyIsArray": [True]})
    assert parquet_columns.lenses_parquet(byte_key, "f") is None  # bytes where base64 text is due: the rows refuse
    null_metadata = pa.array([None], pa.struct([("offset", pa.int64())]))
    # refused row by row
    assert parquet_columns.lenses_parquet(pa.table({**envelope, "metadata": null_metadata}), "f") is None


@pytest.mark.parametrize("value_offset", [0, 3])
def test_confluent_values_placed_around_tombstones_are_the_taken_values(value_offset):
    """offsets.values_in_order (no copy of the bytes, a chunk per value file) against its general twin,
    Arrow's concat and take."""
    import numpy as np

    from compaction_assets.ingest.connectors.offsets import values_in_order

    live_values = [b"a", b"", None, b'{"x":1}', "ü✓".encode(), b"last"]  # a CDC delete is a null value too
    array = pa.array([b"pad"] * value_offset + live_values, pa.binary())[value_offset:]
    tombs = pa.array([None, None, None], pa.binary())
    # values 0..5 in their order, tombstones 6, 7, 8 first, between them and last
    order = np.array([6, 0, 1, 7, 2, 3, 4, 5, 8])
    tomb = order >= len(live_values)
    expected = pa.concat_arrays([array, tombs]).take(pa.array(order)).to_pylist()
    for files in (
        [array, tombs],
        [array[:2], array[2:5], array[5:], tombs[:1], tombs[1:]],
        [array[:0], array, array[:0], tombs],
    ):
        placed = values_in_order(files, order, tomb)
        assert placed is not None and all(c.validate(full=True) is None for c in placed.chunks)
        assert placed.to_pylist() == expected
    swapped = np.array([1, 0, 6, 2, 3, 4, 5, 7, 8])
    assert values_in_order([array, tombs], swapped, swapped >= len(live_values)) is None  # values reordered
    with_value = pa.array([b"v", None, None], pa.binary())
    assert values_in_order([array, with_value], order, tomb) is None  # a tombstone with a value
    only = np.array([0, 1, 2])
    assert values_in_order([array[:0], tombs], only, only >= 0).to_pylist() == [None] * 3  # tombstones alone


def test_a_reordering_of_where_kept_unapplied_names_the_rows_the_applied_one_does():
    """Where.take keeps the order to apply when an error reads a row: taken twice and concatenated with
    another unit, every row names the file and record an eager reordering names."""
    import numpy as np

    first = columns.Where.numbered("a.parquet: record", range(1, 6))
    second = columns.Where.each(["b.json: line 4", "b.json: line 9"])
    once = first.take(np.array([4, 0, 3, 1, 2]))
    twice = once.take(np.array([1, 1, 4, 0]))
    assert [twice[i] for i in range(4)] == [f"a.parquet: record {n}" for n in (1, 1, 3, 5)]
    assert [twice.applied()[i] for i in range(4)] == [twice[i] for i in range(4)]
    both = columns.concat_where([twice, second]).take(np.array([5, 0, 4, 3]))
    assert [both[i] for i in range(4)] == [
        "b.json: line 9",
        "a.parquet: record 1",
        "b.json: line 4",
        "a.parquet: record 5",
    ]


def test_headers_taken_or_concatenated_without_any_header_are_arrows_take_and_concat():
    """take_headers' and concat's rows without any header (new empty lists) against Arrow's list take/concat."""
    import numpy as np

    empty = columns._empty_headers(4)
    some = pa.array([[{"name": "h", "value": b"v"}], [], [{"name": "é", "value": None}]], columns.HEADERS_TYPE)
    for headers in (empty, empty[1:], some):
        order = pa.array([2, 0, 0, 1, 2])
        taken = columns.take_headers(headers, order)
        assert taken.validate(full=True) is None and taken.equals(headers.take(order))
    parts = [
        columns.from_raw(
            shapes.RawBatch(
                [b"k"] * len(h), [b"v"] * len(h), [0] * len(h), [1] * len(h), [[]] * len(h), ["w"] * len(h)
            ),
            "f",
        )
        for h in (empty, some)
    ]
    parts[1] = columns.Columns(
        *[getattr(parts[1], f) for f in ("keys", "values", "structured", "offsets", "timestamps")], some, parts[1].where
    )
    for chosen in ([parts[0], parts[0]], parts):
        joined = columns.concat(chosen).headers
        assert joined.validate(full=True) is None
        assert joined.equals(pa.concat_arrays([p.headers for p in chosen]))
    assert columns.concat(parts).take(np.array([6, 0])).headers.to_pylist() == [[{"name": "é", "value": None}], []]
