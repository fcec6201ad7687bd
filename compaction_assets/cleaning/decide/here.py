"""The offset strategy's decision made in this process with Arrow: a local master's range that fits.

Under a local master Spark's tasks run on this machine's cores, so a group-by there buys no parallelism
this process lacks, and pays for a shuffle of every narrow row and a hash aggregation in the JVM's heap.
Here the range's narrow columns (about 50 bytes a row) are read a thread a core, each key's winner is
found by one hash group-by (its highest offset: under the offset strategy a newer record always wins),
and the decision is worked out from the winners by the functions a decision made in Spark's tasks uses
(decide/task.py), a bucket of keys a thread, each bucket's keys numbered by the hash that split them (the
offset map, segments/offset_map.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.decide.decision import OFFSETS_SCHEMA, LocalDecision, segment_figures, totals
from compaction_assets.cleaning.decide.task import arrow_figures, kept_offsets, offset_decision
from compaction_assets.log.reader import read_file
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.arrays import from_numpy, to_numpy
from compaction_assets.segments.offset_map import highest_offsets, key_hash
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment

# what a row of the range is read as: the key and offset that find the winners, and the winners' fields
NARROW_COLUMNS = ("offset", "key", "timestamp", "is_tombstone", "delete_horizon", "record_size")
# ... named as the decision's columns (decide/grouped.py's WINNER_FIELDS)
WINNER_NAMES = {"is_tombstone": "tomb", "record_size": "size"}
# the hash of a row's key (the offset map's), worked out as the rows are split into buckets
KEY_HASH = "_key_hash"
KEYED_WINNER_SCHEMA = pa.schema(
    [(WINNER_NAMES.get(name, name), SEGMENT_SCHEMA.field(name).type) for name in NARROW_COLUMNS]
)


def decide_here(
    handle: LogHandle,
    manifest: Manifest,
    span: CleaningRange,
    now: int,
    new_horizon: int,
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
) -> LocalDecision:
    """The decision of `span` (the offset strategy's), its files read in `threads` threads here and its
    keys decided in `buckets` buckets."""
    starts = [(i, seg.base_offset) for i, seg in span.segments]
    rows, kept = [], []
    for found in bucket_winners(handle, manifest, span.segments, vector, threads, buckets):
        table = offset_decision(found, starts, now, new_horizon)
        rows += arrow_figures(table)
        kept.append(kept_offsets(table))
    figures, horizons = segment_figures(rows, span.segments)
    return LocalDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        kept=pa.concat_tables(kept) if kept else OFFSETS_SCHEMA.empty_table(),
    )


def newer_winners(
    handle: LogHandle,
    manifest: Manifest,
    segments: list[tuple[int, Segment]],
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
) -> pa.Table:
    """Each key's winner over the segments with its key (the probe's newer rows, probe.py): key, offset
    and WINNER_FIELDS, one table."""
    found = list(bucket_winners(handle, manifest, segments, vector, threads, buckets, with_key=True))
    return pa.concat_tables(found) if found else KEYED_WINNER_SCHEMA.empty_table()


def newer_keys(
    handle: LogHandle, manifest: Manifest, segments: list[tuple[int, Segment]], vector: Callable[[], pa.Array | None]
) -> pa.ChunkedArray:
    """The keys of the segments' visible records (a key as often as it has records): the keys whose
    older records a probe removes, the same as their winners' (newer_winners), had without grouping."""
    dead = vector() if any(seg.dead for _, seg in segments) else None
    tables = [
        read_file(handle, ref, manifest.log_start_offset, dead, ("offset", "key"))
        for _, seg in segments
        for ref in seg.files
    ]
    return pa.chunked_array(
        [chunk for table in tables for chunk in table.column("key").chunks], SEGMENT_SCHEMA.field("key").type
    )


def bucket_winners(
    handle: LogHandle,
    manifest: Manifest,
    segments: list[tuple[int, Segment]],
    vector: Callable[[], pa.Array | None],
    threads: int,
    buckets: int,
    with_key: bool = False,
) -> Iterator[pa.Table]:
    """Each key's winner over the segments' visible records (log start and deletion vector applied, file
    stamps on tombstones), its offset and decide/grouped.py's WINNER_FIELDS (and its key `with_key`): a
    table per bucket of keys.

    The rows are split by a hash of their key as they are read, and each bucket's keys are found apart,
    a bucket a thread: what deciding holds beyond the narrow rows is one bucket's a thread, not the whole
    range's."""
    dead = vector() if any(seg.dead for _, seg in segments) else None
    refs = [ref for _, seg in segments for ref in seg.files]

    def read(ref) -> list[pa.Table]:
        return split_by_key(read_file(handle, ref, manifest.log_start_offset, dead, NARROW_COLUMNS), buckets)

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="decide") as pool:
        parts = [pool.submit(read, ref) for ref in refs]
        by_bucket: list[list[pa.Table]] = [[] for _ in range(buckets)]
        for part in parts:
            for bucket, piece in enumerate(part.result()):
                by_bucket[bucket].append(piece)
        del parts
        # (a bucket's pieces share their file's buffers with the other buckets: the narrow rows are held
        # whole until the last bucket is decided, as placement.py counts them)
        # a bucket a thread; `map` hands the winners over in bucket order (and cancels the buckets not
        # started when the caller stops early)
        decided = pool.map(functools.partial(_bucket_winners, by_bucket, with_key=with_key), range(buckets))
        yield from (table for table in decided if table is not None)


def _bucket_winners(by_bucket: list[list[pa.Table]], bucket: int, with_key: bool) -> pa.Table | None:
    """The winners of one bucket's pieces (None: no row), its pieces let go."""
    pieces, by_bucket[bucket] = by_bucket[bucket], []
    if not pieces:
        return None
    table = pa.concat_tables(pieces)
    return _winners(table, with_key) if len(table) else None


def _winners(table: pa.Table, with_key: bool) -> pa.Table:
    """The rows of `table` (NARROW_COLUMNS and KEY_HASH) that are their key's winner, named as the
    decision reads them."""
    won = highest_offsets(table, to_numpy(table.column(KEY_HASH)))
    winners = table.drop_columns([KEY_HASH] if with_key else [KEY_HASH, "key"]).filter(won)
    return winners.rename_columns([WINNER_NAMES.get(c, c) for c in winners.column_names])


def split_by_key(table: pa.Table, buckets: int) -> list[pa.Table]:
    """`table` in `buckets` parts by a hash of its binary `key` column, the hash as column KEY_HASH: every
    row of a key in one part, in the table's order (Arrow's sort of the bucket numbers is stable)."""
    # the hash goes with the rows: numbering a bucket's keys reads it, not the keys' bytes again
    hashes = key_hash(table.column("key"))
    table = table.append_column(KEY_HASH, from_numpy(hashes))
    if buckets == 1:
        return [table]
    bucket = (hashes % np.uint64(buckets)).astype(np.int64)
    ordered = table.take(pc.sort_indices(from_numpy(bucket)))
    counts = np.bincount(bucket, minlength=buckets)
    starts = np.cumsum(counts) - counts
    return [ordered.slice(int(starts[part]), int(counts[part])) for part in range(buckets)]
