"""Test helper: replace a log's records below an offset with edited ones (a deliberately bad cleaning)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.log.reader import dead_offsets, read_segment
from compaction_assets.segments.records import RECORD_COLUMNS, SEGMENT_SCHEMA, with_derived_columns
from compaction_assets.segments.segment_stats import chunk_stats
from compaction_assets.store.manifest import FileRef, Segment, new_id


def rewrite_below(handle, upto: int, edit) -> None:
    """Records of the segments wholly below `upto` -> edit(list of dicts) -> one new segment."""
    m = handle.manifest()
    k = sum(1 for s in m.segments[:-1] if s.next_offset <= upto)
    dead = dead_offsets(handle, m)
    rows = [r for s in m.segments[:k] for r in read_segment(handle, s, m.log_start_offset, dead).to_pylist()]
    rows = sorted(edit(rows), key=lambda r: r["offset"])
    record_schema = pa.schema([SEGMENT_SCHEMA.field(c) for c in RECORD_COLUMNS])
    table = with_derived_columns(
        pa.Table.from_pylist([{c: r.get(c) for c in RECORD_COLUMNS} for r in rows], schema=record_schema)
    )
    name = handle.new_data_name()
    handle.st.makedirs(handle.path("data"))
    pq.write_table(table, handle.path(name))
    seg = Segment(
        id=new_id(),
        base_offset=m.segments[0].base_offset,
        next_offset=m.segments[k - 1].next_offset,
        files=(FileRef(name, len(table)),),
        **chunk_stats(table),
    )
    # the deletion vector's entries below `upto` no longer apply to the rewritten records
    keep_dv = dead is not None and bool(len(dead)) and max(dead.to_pylist()) >= upto
    handle.update(lambda cur: cur.with_(segments=(seg,) + cur.segments[k:], deleted=cur.deleted if keep_dv else None))
