"""The vectorised logical sizes (records.sizes_array) are SPEC §4's per-record size (records.record_size)
row for row: with null headers, empty header lists (what connector layouts store; the fast path), headers
with null values and multi-byte names, and on sliced, multi-chunk columns as the writer's rolls make them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compaction_assets.segments.records import INPUT_SCHEMA, _header_sizes, record_size, sizes_array

HEADERS = [None, [], [("a", b"1")], [("dbz.version", b"\x00" * 8), ("é✓", None)], [("", b"")], [("x", b"xyz" * 40)]]


def _table(count: int, headers_of) -> pa.Table:
    rows = [
        {
            "offset": i,
            "key": f"key-{i % 7}".encode(),
            "value": None if i % 5 == 2 else b"v" * (i % 13),
            "timestamp": i,
            "headers": headers_of(i),
        }
        for i in range(count)
    ]
    for row in rows:
        if row["headers"] is not None:
            row["headers"] = [{"name": n, "value": v} for n, v in row["headers"]]
    return pa.Table.from_pylist(rows, schema=INPUT_SCHEMA)


def _per_row(table: pa.Table) -> list[int]:
    return [
        record_size(r["key"], r["value"], [(h["name"], h["value"]) for h in r["headers"] or []])
        for r in table.to_pylist()
    ]


def test_tables_without_a_header_take_the_fast_path_and_match_the_per_record_sizes():
    for headers_of in (lambda i: None, lambda i: [], lambda i: None if i % 2 else []):
        table = _table(50, headers_of)
        sizes = sizes_array(table).to_pylist()
        assert sizes == _per_row(table)
        # the general path over the same rows: the fast path leaves out nothing it would have added
        general = np.concatenate([_header_sizes(c) for c in table.column("headers").chunks])
        assert general.tolist() == [0] * 50


def test_headers_of_every_shape_are_counted_row_by_row():
    table = _table(60, lambda i: HEADERS[i % len(HEADERS)])
    assert sizes_array(table).to_pylist() == _per_row(table)
    # one header among empty lists still takes the general path and counts it
    lone = _table(40, lambda i: [("only", b"here")] if i == 33 else [])
    sizes = sizes_array(lone).to_pylist()
    assert sizes == _per_row(lone)
    assert sizes[33] - record_size(lone.column("key")[33].as_py(), lone.column("value")[33].as_py(), []) == 8


def test_sliced_and_chunked_columns_count_only_their_own_rows():
    table = _table(90, lambda i: HEADERS[(i * 5) % len(HEADERS)])
    chunked = pa.concat_tables([table.slice(0, 31), table.slice(31, 29), table.slice(60)])
    assert chunked.column("headers").num_chunks == 3
    assert sizes_array(chunked).to_pylist() == _per_row(table)
    for start, length in ((1, 10), (17, 40), (85, 5)):
        part = table.slice(start, length)
        assert sizes_array(part).to_pylist() == _per_row(table)[start : start + length]
    # a slice whose rows carry no header takes the fast path although its chunk's values hold headers
    quiet = _table(30, lambda i: [("h", b"12")] if i < 10 else [])
    assert sizes_array(quiet.slice(10)).to_pylist() == _per_row(quiet)[10:]


def test_a_null_row_backed_by_headers_counts_none_of_them():
    entries = pa.array(
        [{"name": "a", "value": b"12"}, {"name": "b", "value": b"345"}],
        type=INPUT_SCHEMA.field("headers").type.value_type,
    )
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), entries, mask=pa.array([False, True]))
    table = pa.table({"key": pa.array([b"k", b"kk"]), "value": pa.array([b"v", None], pa.binary()), "headers": headers})
    assert headers.to_pylist()[1] is None
    assert sizes_array(table).to_pylist() == [record_size(b"k", b"v", [("a", b"12")]), record_size(b"kk", None, [])]
