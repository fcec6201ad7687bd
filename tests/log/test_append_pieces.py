"""The one append path (`writer.append_pieces`; `writer.append` is its one-piece case): a batch in pieces leaves
the log the batch whole leaves, a roll before a piece's first record writes no file, and what fails before the
commit leaves no file behind."""

from __future__ import annotations

import os

import pytest

from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.segments.records import coerce_table, record_size
from compaction_assets.topics.config import build_config

SIZE = record_size(b"k0", b"v0", [])
FULL_AT_ONE = build_config({"segment.bytes": SIZE + SIZE // 2})  # a second record rolls the segment
FULL_AT_THREE = build_config({"segment.bytes": 3 * SIZE})


def rows(first: int, count: int) -> list[dict]:
    """`count` records with distinct keys, timestamps from `first`."""
    return [{"key": f"k{i % 10}", "value": f"v{i % 10}", "timestamp": i} for i in range(first, first + count)]


def data_files(handle) -> list[str]:
    """Every Parquet file under the log's data folder, named as a manifest names it."""
    return sorted(
        os.path.relpath(os.path.join(folder, name), handle.path(""))
        for folder, _, names in os.walk(handle.path("data"))
        for name in names
        if name.endswith(".parquet")
    )


def layout(handle) -> list[tuple]:
    """The segments as a reader sees them (not which files hold them)."""
    return [
        (s.base_offset, s.next_offset, s.records, s.size, s.min_ts, s.max_ts, s.first_ts, s.tombstones)
        for s in handle.manifest().segments
    ]


def test_pieces_leave_the_log_the_whole_batch_leaves(store):
    whole, pieced = store.log("whole-0"), store.log("pieced-0")
    for handle in (whole, pieced):
        writer.append(handle, FULL_AT_THREE, rows(0, 2))  # an open segment the batch goes on with
    expected = writer.append(whole, FULL_AT_THREE, rows(2, 7), source="batch")
    # segments [0, 3) [3, 6) [6, 9): one spans the first two pieces, the third piece opens one
    tables = [coerce_table(rows(2, 2)), coerce_table(rows(4, 2)), coerce_table(rows(6, 3))]
    result = writer.append_pieces(pieced, FULL_AT_THREE, lambda: iter(map(writer.Piece, tables)), source="batch")
    assert result == expected and expected.segments_rolled == 2
    assert layout(pieced) == layout(whole)
    assert [(r.offset, r.key, r.value) for r in iter_records(pieced)] == [
        (r.offset, r.key, r.value) for r in iter_records(whole)
    ]


def test_a_roll_before_the_first_record_writes_no_file(store):
    handle = store.log("t-0")
    writer.append(handle, FULL_AT_ONE, rows(0, 1))
    result = writer.append(handle, FULL_AT_ONE, rows(1, 2))  # the open segment is full before record 1
    manifest = handle.manifest()
    assert result.segments_rolled == 2 and [s.records for s in manifest.segments] == [1, 1, 1]
    assert data_files(handle) == sorted(f.name for s in manifest.segments for f in s.files)  # no empty file


def test_a_fault_between_pieces_deletes_the_pieces_written(store):
    handle = store.log("t-0")
    writer.append(handle, FULL_AT_ONE, rows(0, 1))
    before = (handle.manifest().to_json(), data_files(handle))

    def pieces():
        yield writer.Piece(coerce_table(rows(1, 3)))
        raise OSError("landing file vanished")  # reading the next piece fails

    with pytest.raises(OSError, match="landing file vanished"):
        writer.append_pieces(handle, FULL_AT_ONE, pieces, source="group", ingest_name="group-1")
    assert (handle.manifest().to_json(), data_files(handle)) == before
    assert handle.lock_holder("append") is None


def test_an_appended_file_is_written_as_a_rewritten_one(store):
    # the probe of an incremental cleaning reads every kept record of the appended segments: their
    # offsets, keys and timestamps without a dictionary, delta-encoded where ascending, in LZ4
    import pyarrow.parquet as pq

    handle = store.log("t-0")
    writer.append(handle, FULL_AT_THREE, rows(0, 3))
    (name,) = data_files(handle)
    group = pq.ParquetFile(handle.path(name)).metadata.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    assert (
        "DELTA_BINARY_PACKED" in columns["offset"].encodings and "DELTA_BINARY_PACKED" in columns["timestamp"].encodings
    )
    assert not any("DICTIONARY" in e for name in ("offset", "key", "timestamp") for e in columns[name].encodings)
    assert "RLE_DICTIONARY" in columns["value"].encodings
    assert {column.compression for column in columns.values()} == {"LZ4"}  # (pyarrow's name of LZ4_RAW)
