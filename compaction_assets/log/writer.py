"""Writing to a log: append with the roll rules, roll, log-start moves and checkpoint overwrites (SPEC §1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import ConflictError, InvalidInputError, OffsetError
from compaction_assets.log.config import Strategy, TopicConfig
from compaction_assets.log.manifest import FileRef, Hold, Manifest, Segment, new_id
from compaction_assets.log.records import coerce_table, sizes_array, with_derived_columns
from compaction_assets.log.reader import dead_offsets
from compaction_assets.log.segment_stats import add_chunk, chunk_stats, restat
from compaction_assets.log.store import LogHandle

APPEND_ATTEMPTS = 5   # an append is re-planned when a concurrent evaluation sealed the active segment


@dataclass
class AppendResult:
    records: int
    first_offset: int | None
    last_offset: int | None
    invalid_records: int
    segments_rolled: int
    log_end_offset: int
    already_ingested: bool = False


def assign_offsets(explicit: pa.Array, leo: int, source: str) -> np.ndarray:
    """Offsets of a batch: explicit ones must be strictly increasing and >= LEO; the rest follow on."""
    n = len(explicit)
    if explicit.null_count == n:
        return np.arange(leo, leo + n, dtype=np.int64)
    if explicit.null_count == 0:
        offs = explicit.to_numpy().astype(np.int64)
        if offs[0] < leo:
            raise InvalidInputError(
                f"{source}: offset {offs[0]} is below the log end offset {leo} (offsets must be >= LEO)", row=0)
        bad = np.flatnonzero(offs[1:] <= offs[:-1])
        if bad.size:
            i = int(bad[0]) + 1
            raise InvalidInputError(
                f"{source}: offset {offs[i]} follows offset {offs[i - 1]} (offsets must be strictly increasing)",
                row=i)
        return offs
    out = np.empty(n, dtype=np.int64)
    nxt = leo
    for i, off in enumerate(explicit.to_pylist()):
        if off is None:
            off = nxt
        elif off < nxt:
            raise InvalidInputError(
                f"{source}: offset {off} is below the next offset {nxt} (offsets must be strictly "
                "increasing and >= the log end offset)", row=i)
        out[i] = off
        nxt = off + 1
    return out


def find_rolls(sizes: np.ndarray, ts: np.ndarray, active_size: int, active_min_ts: int | None,
               segment_bytes: int, interval_ms: int) -> list[int]:
    """Indices j of the batch before which the active segment is sealed (SPEC §1 roll rules)."""
    rolls: list[int] = []
    n = len(sizes)
    i = 0
    cur_size, cur_min = active_size, active_min_ts
    window = 64
    while i < n:
        if cur_min is None:  # empty active segment: record i opens it
            cur_size, cur_min = int(sizes[i]), int(ts[i])
            i += 1
            continue
        while True:
            end = min(n, i + window)
            s, t = sizes[i:end], ts[i:end]
            before = cur_size + np.concatenate(([0], np.cumsum(s)[:-1]))
            min_before = np.minimum(cur_min, np.concatenate(([cur_min], np.minimum.accumulate(t)[:-1])))
            hit = np.flatnonzero((before + s > segment_bytes) | (t - min_before > interval_ms))
            if hit.size:
                j = i + int(hit[0])
                rolls.append(j)
                window = max(64, 2 * (j - i))
                cur_size, cur_min, i = int(sizes[j]), int(ts[j]), j + 1
                break
            if end == n:
                cur_size, cur_min, i = int(before[-1] + s[-1]), int(min(min_before[-1], t[-1])), n
                break
            window *= 2
    return rolls


def plan_batch(explicit: pa.Array, null_keys: np.ndarray, timestamps: pa.Array, leo: int, now: int | None,
               drop_invalid: bool, source: str):
    """Offsets and timestamps of a batch, checked (SPEC §1). Returns (keep mask or None, offsets,
    timestamps, invalid count); raises InvalidInputError naming the source and offset."""
    offsets = assign_offsets(explicit, leo, source)
    invalid = int(null_keys.sum())
    keep = None
    rows = np.arange(len(null_keys))     # batch row of each record still in play
    if invalid and not drop_invalid:
        first = int(np.flatnonzero(null_keys)[0])
        raise InvalidInputError(
            f"{source}: record at offset {offsets[first]} has a null key; a compacted log needs keyed "
            f"records ({invalid} such record(s); nothing of this batch was written)", row=first)
    if invalid:
        keep = ~null_keys
        rows = np.flatnonzero(keep)
        explicit = explicit.filter(pa.array(keep))
        timestamps = timestamps.filter(pa.array(keep))
        try:
            offsets = assign_offsets(explicit, leo, source)
        except InvalidInputError as exc:
            exc.row = None if exc.row is None else int(rows[exc.row])
            raise
    if timestamps.null_count:
        if now is None:
            first = int(np.flatnonzero(pc.is_null(timestamps).to_numpy(zero_copy_only=False))[0])
            raise InvalidInputError(f"{source}: record at offset {offsets[first]} has no timestamp",
                                    row=int(rows[first]))
        timestamps = pc.fill_null(timestamps, now)
    ts = timestamps.to_numpy().astype(np.int64) if len(timestamps) else np.empty(0, np.int64)
    neg = np.flatnonzero(ts < 0)
    if neg.size:
        raise InvalidInputError(f"{source}: record at offset {offsets[neg[0]]} has a negative timestamp {ts[neg[0]]}",
                                row=int(rows[neg[0]]))
    return keep, offsets, ts, invalid


def validate(table: pa.Table, leo: int, now: int | None, drop_invalid: bool, source: str):
    """A batch's records as stored (offsets, timestamps, derived columns) and its invalid count (SPEC §1)."""
    null_keys = pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
    keep, offsets, ts, invalid = plan_batch(_array(table.column("offset")), null_keys,
                                            _array(table.column("timestamp")), leo, now, drop_invalid, source)
    if keep is not None:
        table = table.filter(pa.array(keep))
    out = with_derived_columns(pa.table({
        "offset": pa.array(offsets, pa.int64()), "key": table.column("key").cast(pa.binary()),
        "value": table.column("value"), "timestamp": pa.array(ts, pa.int64()),
        "headers": table.column("headers"), "delete_horizon": pa.nulls(len(table), pa.int64()),
    }))
    return out, invalid


def _array(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col


def write_file(handle: LogHandle, table: pa.Table) -> FileRef:
    """Records written as a new data file of the log (referenced once a commit names it)."""
    name = handle.new_data_name()
    handle.st.write_parquet(handle.path(name), table)
    return FileRef(name=name, records=len(table))


def append(handle: LogHandle, config: TopicConfig, data: Any, *, now: int | None = None,
           drop_invalid: bool = False, source: str = "input", ingest_name: str | None = None) -> AppendResult:
    """Append a batch (Arrow table, pandas DataFrame or dicts) with SPEC §1's rules; all or nothing.

    With `ingest_name` (a landing file), the name is recorded in the same commit and a second append
    with the same name is a no-op, so re-running an ingestion never appends a file twice.
    """
    table = coerce_table(data, source)
    with handle.lock("append", purpose=f"append from {source}"):
        for attempt in range(APPEND_ATTEMPTS):
            base = handle.manifest()
            if ingest_name is not None and ingest_name in base.ingested:
                return AppendResult(0, None, None, 0, 0, base.log_end_offset, already_ingested=True)
            records, invalid = validate(table, base.log_end_offset, now, drop_invalid, source)
            if len(records) == 0:
                handle.update(lambda m: m.with_(invalid_records=m.invalid_records + invalid,
                                                ingested=m.ingested + ((ingest_name,) if ingest_name else ())))
                return AppendResult(0, None, None, invalid, 0, base.log_end_offset)
            offsets = records.column("offset").to_numpy()
            active = base.active
            rolls = find_rolls(sizes_array(records).to_numpy(), records.column("timestamp").to_numpy(),
                               active.size, active.min_ts if not active.empty else None,
                               config.segment_bytes, config.roll_interval_ms)
            bounds = [0, *rolls, len(records)]
            refs = [(write_file(handle, records.slice(a, b - a)), chunk_stats(records.slice(a, b - a)))
                    for a, b in zip(bounds, bounds[1:])]
            holds = new_holds(handle, base, config, records)
            try:
                commit_append(handle, base, [(int(offsets[a]), [ref], st) for a, (ref, st) in zip(bounds, refs)],
                              int(offsets[-1]) + 1, invalid, holds, ingest_name)
                break
            except ConflictError:
                # A cleaning's evaluation sealed the active segment meanwhile (a deadline roll): the roll
                # rules must be applied again to the new active segment. Our files are not referenced.
                for ref, _ in refs:
                    handle.st.delete(handle.path(ref.name))
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
    return AppendResult(len(records), int(offsets[0]), int(offsets[-1]), invalid, len(rolls),
                        int(offsets[-1]) + 1)


def commit_append(handle: LogHandle, base: Manifest, chunks: list[tuple[int, list[FileRef], dict]], leo: int,
                  invalid: int, holds: tuple[Hold, ...], ingest_name: str | None = None) -> Manifest:
    """Commit appended chunks (first offset, files, stats), each after the first opening a new segment."""
    active = base.active
    starts_log = base.is_empty_log

    def change(manifest: Manifest) -> Manifest:
        if manifest.active.id != active.id or manifest.log_end_offset != base.log_end_offset:
            raise ConflictError(f"log {handle.name!r} changed during the append; nothing was written")
        segs = list(manifest.segments[:-1])
        first_offset = chunks[0][0]
        cur = Segment(new_id(), first_offset, first_offset) if starts_log else manifest.active
        for idx, (first, refs, stats) in enumerate(chunks):
            if idx > 0:  # seal: the sealed segment ends where the triggering record begins
                segs.append(Segment(**{**cur.__dict__, "next_offset": first}))
                cur = Segment(new_id(), first, first)
            cur = add_chunk(cur, refs, stats)
        segs.append(Segment(**{**cur.__dict__, "next_offset": leo}))
        changes: dict[str, Any] = dict(segments=tuple(segs), log_end_offset=leo,
                                       invalid_records=manifest.invalid_records + invalid, holds=manifest.holds + holds)
        if ingest_name is not None:
            changes["ingested"] = manifest.ingested + (ingest_name,)
        if starts_log:
            changes.update(log_start_offset=first_offset, checkpoint=first_offset)
        return manifest.with_(**changes)
    return handle.update(change)


def new_holds(handle: LogHandle, manifest: Manifest, config: TopicConfig, records: pa.Table) -> tuple[Hold, ...]:
    """Kept tombstones that appended records would lose to (timestamp/header strategies, SPEC §6 guard)."""
    if config.strategy == Strategy.OFFSET or not manifest.tombstone_index or not manifest.tombstone_index.get("count"):
        return ()
    from compaction_assets.log.ranking import losers_to_tombstones  # local import: only these strategies need it
    idx = handle.st.read_parquet(handle.path(manifest.tombstone_index["file"]))
    idx = idx.filter(pc.greater_equal(idx.column("offset"), manifest.log_start_offset))  # gone below log start
    found = losers_to_tombstones(idx, records, config)
    return tuple(Hold(offset=o, horizon=h, until=u) for o, h, u in found)


def roll(handle: LogHandle) -> Manifest:
    """Seal the active segment at the log end offset (a no-op when it is empty)."""
    def change(manifest: Manifest) -> Manifest | None:
        if manifest.active.empty:
            return None
        sealed = Segment(**{**manifest.active.__dict__, "next_offset": manifest.log_end_offset})
        return manifest.with_(segments=manifest.segments[:-1] + (sealed, Segment(new_id(), manifest.log_end_offset,
                                                                   manifest.log_end_offset)))
    return handle.update(change)


def set_log_start(handle: LogHandle, offset: int) -> Manifest:
    """Move log_start_offset up to `offset` (SPEC §1): whole segments below it go; refused beyond LEO."""
    def change(manifest: Manifest) -> Manifest | None:
        if offset > manifest.log_end_offset:
            raise OffsetError(f"log {handle.name!r}: cannot move the log start to {offset}, beyond the "
                              f"log end offset {manifest.log_end_offset}")
        if offset <= manifest.log_start_offset:
            return None
        return move_log_start(handle, manifest, offset)
    return handle.update(change)


def move_log_start(handle: LogHandle, manifest: Manifest, offset: int) -> Manifest:
    """The manifest with its log start moved to `offset` (segments below it dropped)."""
    segs = []
    dead = dead_offsets(handle, manifest)
    for i, seg in enumerate(manifest.segments):
        last = i == len(manifest.segments) - 1
        if seg.next_offset <= offset and not last:
            continue  # wholly below: deleted
        if seg.base_offset < offset and seg.records:
            seg = restat(handle, seg, offset, dead)
        segs.append(seg)
    holds = tuple(h for h in manifest.holds if h.offset >= offset)
    return manifest.with_(segments=tuple(segs), log_start_offset=offset, holds=holds)


def set_checkpoint(handle: LogHandle, offset: int) -> Manifest:
    """Overwrite the stored cleaner checkpoint (an operator action; resets follow SPEC §3)."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise OffsetError(f"checkpoint {offset!r} is not an integer")
    return handle.update(lambda m: m.with_(checkpoint=offset))


def write_df(handle: LogHandle, df, relative: str, *, partition_by: str | None = None) -> None:
    """Write a DataFrame as Parquet under the log's folder `relative`, on any store: Spark's writer for
    local files, pyarrow in Python workers on an object store (no Hadoop connector needed), one file
    per Spark partition either way (and per value of `partition_by`, in `<col>=<value>/` folders)."""
    if handle.st.local:
        w = df.write if partition_by is None else df.write.partitionBy(partition_by)
        w.parquet(handle.spark_uri(relative))
        return
    from pyspark import cloudpickle

    from compaction_assets.log import segment_task

    cloudpickle.register_pickle_by_value(segment_task)
    runner = segment_task.file_writer(handle.st.filesystem_spec(), handle.path(relative), partition_by)
    df.mapInArrow(runner, "path string, rows long").collect()

