"""A log's change to its table as the records it appended since the table's mark, when that is the whole change.

Under the offset strategy a key's winner is its highest offset, so the records a log appended since the
offsets a table reflects (its mark, table/summary.py) win over every row the table holds for their keys: the
table is brought up by those records alone, and a commit reads the log's tail, not its whole history
(change.py's comparison with the whole latest state). That holds while nothing else changed the log's
latest state since the mark: the same log start, and the same `removals` count (store/manifest.py: a
cleaning that dropped expired tombstones, retention, a log-start move or a forget each add one). A
cleaning that only removed superseded records leaves it, as it leaves the latest state. The timestamp and
header strategies rank a key's records by more than the offset (a late record may lose to the table's
row) and are compared with the whole state.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.log.reader import dead_offsets, read_segment
from compaction_assets.log.strategies import strategy_of
from compaction_assets.segments.offset_map import highest_offsets
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.state.latest_state import OUTPUT_COLUMNS
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.table.summary import LogMark
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class Tail:
    """The records a log appended after its table's mark, as a change: each touched key's last record with
    a value (the rows to append, in the latest state's columns), and every touched key (their old rows are
    masked, tombstoned or not), against `mark` (a retry against another mark needs another tail)."""

    mark: LogMark
    rows: pa.Table
    keys: pa.Array
    records: int  # the tail's visible records read


def tail_since(handle: LogHandle, config: TopicConfig, manifest: Manifest, mark: LogMark | None) -> Tail | None:
    """The log's change since `mark` as its appended records, or None when the whole latest state must be
    compared (no mark, a strategy that ranks by more than the offset, records removed or the log start
    moved since the mark)."""
    if mark is None or mark.removals is None or strategy_of(config).rank_columns:
        return None
    if mark.removals != manifest.removals or mark.log_start_offset != manifest.log_start_offset:
        return None
    if mark.log_end_offset > manifest.log_end_offset:
        return None
    start = max(mark.log_end_offset, manifest.log_start_offset)
    segments = [seg for seg in manifest.segments if seg.files and seg.next_offset > start]
    dead = dead_offsets(handle, manifest) if segments else None
    parts = [read_segment(handle, seg, start, dead) for seg in segments]
    records = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table()
    last = records.filter(highest_offsets(records)) if len(records) else records
    rows = last.filter(pc.is_valid(last.column("value")))
    return Tail(mark, rows.select(list(OUTPUT_COLUMNS)), last.column("key").combine_chunks(), len(records))
