"""A rewritten run gathers the records it keeps into row groups of at least a read batch, whatever few of
them each source file's batch keeps: a file of hundreds of tiny row groups reads three times slower."""

from __future__ import annotations

import threading
import time

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.segments.segment_task import RewriteSpec, in_order, rewrite_one

FILES, ROWS_A_FILE, KEEP_EVERY = 30, 1000, 100


def _segment_file(path: str, first: int) -> None:
    offsets = np.arange(first, first + ROWS_A_FILE, dtype=np.int64)
    pq.write_table(
        pa.table(
            {
                "offset": offsets,
                "key": [b"k%d" % (o % 97) for o in offsets.tolist()],
                "value": [b"v%d" % o for o in offsets.tolist()],
                "timestamp": offsets + 1000,
                "headers": pa.nulls(len(offsets), SEGMENT_SCHEMA.field("headers").type),
                "delete_horizon": pa.nulls(len(offsets), pa.int64()),
                "record_size": np.full(len(offsets), 24, np.int64),
                "is_tombstone": np.zeros(len(offsets), bool),
            },
            schema=SEGMENT_SCHEMA,
        ),
        path,
    )


def test_kept_records_are_gathered_into_row_groups_of_a_read_batch(tmp_path):
    paths = [str(tmp_path / f"seg-{n}.parquet") for n in range(FILES)]
    for n, path in enumerate(paths):
        _segment_file(path, n * ROWS_A_FILE)
    keep = np.arange(0, FILES * ROWS_A_FILE, KEEP_EVERY, dtype=np.int64)  # 10 records of each file
    out = str(tmp_path / "clean.parquet")
    spec = RewriteSpec(unit=0, files=tuple((p, None) for p in paths), min_offset=0, horizon=0, out=out)

    path, written, size = rewrite_one(spec, keep, pafs.LocalFileSystem(), SEGMENT_SCHEMA, batch_rows=64)

    meta = pq.ParquetFile(out).metadata
    groups = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert (path, written, size) == (out, len(keep), (tmp_path / "clean.parquet").stat().st_size)
    assert np.array_equal(pq.read_table(out).column("offset").to_numpy(), keep)
    # each of the 30 files keeps 10 records; written batch by batch they made 30 row groups of 10
    assert all(rows >= 64 for rows in groups[:-1]) and sum(groups) == len(keep)
    assert len(groups) == 5, groups


def test_a_run_read_ahead_by_threads_writes_the_same_file(tmp_path):
    paths = [str(tmp_path / f"seg-{n}.parquet") for n in range(FILES)]
    for n, path in enumerate(paths):
        _segment_file(path, n * ROWS_A_FILE)
    keep = np.arange(3, FILES * ROWS_A_FILE, 7, dtype=np.int64)
    tables = {}
    for readers in (1, 3):
        out = str(tmp_path / f"clean-{readers}.parquet")
        spec = RewriteSpec(unit=0, files=tuple((p, None) for p in paths), min_offset=5, horizon=0, out=out)
        _, written, _ = rewrite_one(spec, keep, pafs.LocalFileSystem(), SEGMENT_SCHEMA, batch_rows=256, readers=readers)
        tables[readers] = pq.read_table(out)
        assert written == len(keep) - 1  # offset 3 lies below the log start
    assert tables[3].equals(tables[1])
    assert np.array_equal(tables[3].column("offset").to_numpy(), keep[1:])


def test_in_order_keeps_the_order_and_runs_at_most_its_threads_ahead():
    started, consumed = [], []
    lock = threading.Lock()

    def work(n: int) -> int:
        with lock:
            started.append(n)
            # what has started but not been consumed: the threads' results waiting, at most
            assert n - len(consumed) <= 2, (n, consumed)
        time.sleep(0.002 * (n % 3))
        return n * n

    for value in in_order(work, 20, 2):
        consumed.append(value)
    assert consumed == [n * n for n in range(20)] and sorted(started) == list(range(20))


def test_in_order_stops_at_a_failure():
    def work(n: int) -> int:
        if n == 4:
            raise OSError("file 4 unreadable")
        return n

    seen = []
    with pytest.raises(OSError, match="file 4"):
        for value in in_order(work, 50, 3):
            seen.append(value)
    assert seen == [0, 1, 2, 3]


def test_a_rewritten_file_holds_offsets_keys_and_timestamps_without_a_dictionary_in_lz4(tmp_path):
    # a rewritten segment holds a key once: a dictionary of its unique columns cost its write and reads
    paths = [str(tmp_path / f"seg-{n}.parquet") for n in range(2)]
    for n, path in enumerate(paths):
        _segment_file(path, n * ROWS_A_FILE)
    keep = np.arange(0, 2 * ROWS_A_FILE, 3, dtype=np.int64)
    out = str(tmp_path / "clean.parquet")
    rewrite_one(
        RewriteSpec(unit=0, files=tuple((p, None) for p in paths), min_offset=0, horizon=0, out=out),
        keep,
        pafs.LocalFileSystem(),
        SEGMENT_SCHEMA,
    )

    group = pq.ParquetFile(out).metadata.row_group(0)
    encodings = {group.column(i).path_in_schema: set(group.column(i).encodings) for i in range(group.num_columns)}
    assert "DELTA_BINARY_PACKED" in encodings["offset"] and "DELTA_BINARY_PACKED" in encodings["timestamp"]
    assert not any("DICTIONARY" in e for name in ("offset", "key", "timestamp") for e in encodings[name])
    assert "RLE_DICTIONARY" in encodings["value"] and "RLE_DICTIONARY" in encodings["record_size"]
    # (pyarrow names LZ4_RAW, the codec it writes, "LZ4")
    assert {group.column(i).compression for i in range(group.num_columns)} == {"LZ4"}
    table = pq.read_table(out)
    assert np.array_equal(table.column("offset").to_numpy(), keep)
    assert table.column("key").to_pylist() == [b"k%d" % (o % 97) for o in keep.tolist()]
    assert np.array_equal(table.column("timestamp").to_numpy(), keep + 1000)
