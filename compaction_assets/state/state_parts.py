"""The offset strategy's latest state written file by file, for a log a cleaning has left clean below a point.

Below the last cleaning's `unique_keys_below` a key has one visible record, and under the offset strategy
any record of the same key above that point beats it. So a clean record is in the state unless it is a
tombstone or its key appears in the tail; the tail's own winners are its highest offsets. Each clean
segment file is read, filtered once and written as one part of the state by a thread of this process:
nothing holds the whole log, and the memory a file took is reused for the next one (a state built as one
table and written after was copied three times).

The parts hold the same rows, in the same order, as `latest_state_table(..., ordered=False)`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.log.reader import dead_offsets, read_file
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import unique_keys_below
from compaction_assets.segments.offset_map import highest_offsets
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Manifest
from compaction_assets.topics.config import TopicConfig


def written_by_parts(config: TopicConfig, manifest: Manifest) -> bool:
    """Whether the latest state of this log can be written file by file: an unranked strategy (the newest
    record wins: the offset strategy), after a cleaning."""
    return not strategy_of(config).ranked and unique_keys_below(manifest) is not None


def write_state_parts(
    handle: LogHandle, manifest: Manifest, st, target: str, columns: tuple[str, ...], threads: int
) -> int:
    """Write the latest state's `columns` into the empty folder `target` of storage `st`, a Parquet part a
    clean segment file and one for the tail's winners (`threads` files at once); the rows written."""
    below = unique_keys_below(manifest)
    assert below is not None, "written by parts only after a cleaning (`written_by_parts`)"
    dead = dead_offsets(handle, manifest)
    segments = [seg for seg in manifest.segments if seg.files]
    clean_files = [ref for seg in segments if seg.next_offset <= below for ref in seg.files]
    tail_refs = [ref for seg in segments if seg.next_offset > below for ref in seg.files]
    tail = (
        pa.concat_tables([read_file(handle, ref, manifest.log_start_offset, dead) for ref in tail_refs])
        if tail_refs
        else None
    )
    # every key the tail holds, its tombstones' included: a clean record of such a key has lost
    tail_keys = pc.unique(tail.column("key")) if tail is not None and len(tail) else None

    def write(number: int, table: pa.Table) -> int:
        st.write_parquet(
            f"{target.rstrip('/')}/part-{number:05d}.parquet", table.select(list(columns)), compression="snappy"
        )
        return len(table)

    def clean_part(number: int, ref: FileRef) -> int:
        table = read_file(handle, ref, manifest.log_start_offset, dead)
        keep = pc.is_valid(table.column("value"))
        if tail_keys is not None:
            keep = pc.and_(keep, pc.invert(pc.is_in(table.column("key"), value_set=tail_keys)))
        table = table.filter(keep)
        return write(number, table) if len(table) else 0

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="state") as pool:
        rows = sum(pool.map(clean_part, range(len(clean_files)), clean_files))
    if tail is not None and len(tail):
        won = tail.filter(pc.and_(highest_offsets(tail), pc.is_valid(tail.column("value"))))
        rows += write(len(clean_files), won) if len(won) else 0
    if not rows:  # an empty state is still a table with its columns
        write(0, SEGMENT_SCHEMA.empty_table())
    return rows
