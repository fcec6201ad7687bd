"""A native landing folder's files read two at a time in threads (ingest/formats/native_reads.py): handed
over in name order whatever read finished first, a refused file handed over in its place and nothing after
it, and an ingestion of many files appends them in order with one name each, up to a refused one."""

from __future__ import annotations

import json
from contextlib import closing

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.layouts import discover
from compaction_assets.ingest.formats.native_reads import ReadFile, Refused, read_files
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log.reader import iter_records
from compaction_assets.topics.config import build_config


def _landing(tmp_path, sizes: list[int], bad: int | None = None):
    """Files f00.jsonl... of `sizes` records each (big and small mixed, so later reads can finish first);
    file `bad` has a malformed third line."""
    folder = tmp_path / "landing" / "users" / "partition=0"
    folder.mkdir(parents=True)
    ts = 0
    for index, size in enumerate(sizes):
        lines = []
        for _ in range(size):
            lines.append(json.dumps({"key": f"k{ts % 7}", "value": f"v{ts}", "timestamp": ts}))
            ts += 1
        if index == bad:
            lines[2] = '{"key": "k", "value": '
        (folder / f"f{index:02d}.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "landing"


def _source(root):
    return discover(root)[0]["users-0"]


def test_files_come_in_name_order_whatever_read_ends_first(tmp_path):
    sizes = [6000, 3, 5, 6000, 1, 2, 3000, 4]
    src = _source(_landing(tmp_path, sizes))
    with closing(read_files(src, src.files)) as reads:
        got = list(reads)
    assert [r.landed.name for r in got] == [f"f{i:02d}.jsonl" for i in range(len(sizes))]
    assert all(isinstance(r, ReadFile) for r in got)
    assert [r.table.num_rows for r in got if isinstance(r, ReadFile)] == sizes


def test_a_refused_file_comes_in_its_place_and_nothing_after_it(tmp_path):
    src = _source(_landing(tmp_path, [50, 50, 50, 50, 50, 50], bad=3))
    with closing(read_files(src, src.files)) as reads:
        got = list(reads)
    assert [type(r) for r in got] == [ReadFile, ReadFile, ReadFile, Refused]
    refused = got[-1]
    assert isinstance(refused, Refused) and "f03.jsonl: line 3" in str(refused.error)


def test_leaving_early_waits_for_the_reads_under_way(tmp_path):
    src = _source(_landing(tmp_path, [2000] * 6))
    reads = read_files(src, src.files)
    first = next(reads)
    reads.close()  # the caller's append failed: no read is left running, the others never start
    assert isinstance(first, ReadFile) and first.landed.name == "f00.jsonl"


def test_an_ingestion_of_many_files_appends_them_in_order_up_to_the_refused_one(tmp_path, store):
    sizes = [300, 2, 3000, 1, 40, 5, 900]
    root = _landing(tmp_path, sizes, bad=5)
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({}), landing_logs(str(root))[0]["users-0"])
    assert "f05.jsonl: line 3" in str(info.value) and "\n" not in str(info.value)
    before = sum(sizes[:5])
    assert [(r.offset, r.value, r.timestamp) for r in iter_records(handle)] == [
        (i, f"v{i}".encode(), i) for i in range(before)
    ]
    assert handle.manifest().ingested == tuple(f"f{i:02d}.jsonl" for i in range(5))
