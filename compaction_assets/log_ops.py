"""Writing to a log: append with the roll rules, roll, log-start moves and checkpoint overwrites (SPEC §1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .config import TopicConfig
from .errors import ConflictError, InvalidInputError, OffsetError
from .manifest import FileRef, Hold, Manifest, Segment, new_id
from .records import SEGMENT_SCHEMA, coerce_table, sizes_array
from .segment_stats import add_chunk, chunk_stats, restat
from .store import LogHandle


@dataclass
class AppendResult:
    records: int
    first_offset: int | None
    last_offset: int | None
    invalid_records: int
    segments_rolled: int
    log_end_offset: int


def assign_offsets(explicit: pa.Array, leo: int, source: str) -> np.ndarray:
    """Offsets of a batch: explicit ones must be strictly increasing and >= LEO; the rest follow on."""
    n = len(explicit)
    if explicit.null_count == n:
        return np.arange(leo, leo + n, dtype=np.int64)
    if explicit.null_count == 0:
        offs = explicit.to_numpy().astype(np.int64)
        if offs[0] < leo:
            raise InvalidInputError(
                f"{source}: offset {offs[0]} is below the log end offset {leo} (offsets must be >= LEO)")
        bad = np.flatnonzero(offs[1:] <= offs[:-1])
        if bad.size:
            i = int(bad[0]) + 1
            raise InvalidInputError(
                f"{source}: offset {offs[i]} follows offset {offs[i - 1]} (offsets must be strictly increasing)")
        return offs
    out = np.empty(n, dtype=np.int64)
    nxt = leo
    for i, off in enumerate(explicit.to_pylist()):
        if off is None:
            off = nxt
        elif off < nxt:
            raise InvalidInputError(
                f"{source}: offset {off} is below the next offset {nxt} (offsets must be strictly "
                "increasing and >= the log end offset)")
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


def _validate(table: pa.Table, leo: int, now: int | None, drop_invalid: bool, source: str):
    offsets = assign_offsets(table.column("offset"), leo, source)
    null_keys = pc.is_null(table.column("key"))
    invalid = int(pc.sum(null_keys).as_py() or 0)
    if invalid and not drop_invalid:
        first = int(np.flatnonzero(null_keys.to_numpy(zero_copy_only=False))[0])
        raise InvalidInputError(
            f"{source}: record at offset {offsets[first]} has a null key; a compacted log needs keyed "
            f"records ({invalid} such record(s); nothing of this batch was written)")
    if invalid:
        table = table.filter(pc.invert(null_keys))
        offsets = assign_offsets(table.column("offset"), leo, source)
    ts = table.column("timestamp")
    if ts.null_count:
        if now is None:
            first = int(np.flatnonzero(pc.is_null(ts).to_numpy(zero_copy_only=False))[0])
            raise InvalidInputError(f"{source}: record at offset {offsets[first]} has no timestamp")
        ts = pc.fill_null(ts, now)
    ts_np = ts.to_numpy().astype(np.int64) if len(ts) else np.empty(0, np.int64)
    neg = np.flatnonzero(ts_np < 0)
    if neg.size:
        raise InvalidInputError(
            f"{source}: record at offset {offsets[neg[0]]} has a negative timestamp {ts_np[neg[0]]}")
    out = pa.table({
        "offset": pa.array(offsets, pa.int64()), "key": table.column("key").cast(pa.binary()),
        "value": table.column("value"), "timestamp": pa.array(ts_np, pa.int64()),
        "headers": table.column("headers"), "delete_horizon": pa.nulls(len(table), pa.int64()),
    }, schema=SEGMENT_SCHEMA)
    return out, invalid


def _write(handle: LogHandle, table: pa.Table) -> FileRef:
    name = handle.new_data_name()
    handle.st.makedirs(handle.path("data"))
    pq.write_table(table, handle.path(name), filesystem=None if handle.st.local else handle.st.fs)
    return FileRef(name=name, records=len(table))


def append(handle: LogHandle, config: TopicConfig, data: Any, *, now: int | None = None,
           drop_invalid: bool = False, source: str = "input") -> AppendResult:
    """Append a batch (Arrow table, pandas DataFrame or dicts) with SPEC §1's rules; all or nothing."""
    table = coerce_table(data, source)
    with handle.lock("append", purpose=f"append from {source}"):
        base = handle.manifest()
        records, invalid = _validate(table, base.log_end_offset, now, drop_invalid, source)
        if len(records) == 0:
            if invalid:
                handle.update(lambda m: m.with_(invalid_records=m.invalid_records + invalid))
            return AppendResult(0, None, None, invalid, 0, base.log_end_offset)
        offsets = records.column("offset").to_numpy()
        active = base.active
        starts_log = base.is_empty_log
        rolls = find_rolls(sizes_array(records).to_numpy(), records.column("timestamp").to_numpy(),
                           active.size, active.min_ts if not active.empty else None,
                           config.segment_bytes, config.roll_interval_ms)
        bounds = [0, *rolls, len(records)]
        refs = [(_write(handle, records.slice(a, b - a)), chunk_stats(records.slice(a, b - a)))
                for a, b in zip(bounds, bounds[1:])]
        holds = new_holds(handle, base, config, records)

        def change(m: Manifest) -> Manifest:
            if m.active.id != active.id or m.log_end_offset != base.log_end_offset:
                raise ConflictError(f"log {handle.name!r} changed during the append; nothing was written")
            segs = list(m.segments[:-1])
            cur = m.active
            if starts_log:
                cur = Segment(new_id(), int(offsets[0]), int(offsets[0]))
            for idx, (ref, stats) in enumerate(refs):
                if idx > 0:  # seal: the sealed segment ends where the triggering record begins
                    first = int(offsets[bounds[idx]])
                    segs.append(Segment(**{**cur.__dict__, "next_offset": first}))
                    cur = Segment(new_id(), first, first)
                cur = add_chunk(cur, ref, stats)
            leo = int(offsets[-1]) + 1
            segs.append(Segment(**{**cur.__dict__, "next_offset": leo}))
            changes: dict[str, Any] = dict(segments=tuple(segs), log_end_offset=leo,
                                           invalid_records=m.invalid_records + invalid,
                                           holds=m.holds + holds)
            if starts_log:
                changes.update(log_start_offset=int(offsets[0]), checkpoint=int(offsets[0]))
            return m.with_(**changes)

        handle.update(change)
    return AppendResult(len(records), int(offsets[0]), int(offsets[-1]), invalid, len(rolls),
                        int(offsets[-1]) + 1)


def new_holds(handle: LogHandle, m: Manifest, config: TopicConfig, records: pa.Table) -> tuple[Hold, ...]:
    """Kept tombstones that appended records would lose to (timestamp/header strategies, SPEC §6 guard)."""
    if config.strategy == "offset" or not m.tombstone_index or not m.tombstone_index.get("count"):
        return ()
    from .ranking import losers_to_tombstones  # local import: only these strategies need it
    idx = pq.read_table(handle.path(m.tombstone_index["file"]),
                        filesystem=None if handle.st.local else handle.st.fs)
    found = losers_to_tombstones(idx, records, config)
    return tuple(Hold(offset=o, horizon=h, until=u) for o, h, u in found)


def roll(handle: LogHandle) -> Manifest:
    """Seal the active segment at the log end offset (a no-op when it is empty)."""
    def change(m: Manifest) -> Manifest | None:
        if m.active.empty:
            return None
        sealed = Segment(**{**m.active.__dict__, "next_offset": m.log_end_offset})
        return m.with_(segments=m.segments[:-1] + (sealed, Segment(new_id(), m.log_end_offset,
                                                                   m.log_end_offset)))
    return handle.update(change)


def set_log_start(handle: LogHandle, offset: int) -> Manifest:
    """Move log_start_offset up to `offset` (SPEC §1): whole segments below it go; refused beyond LEO."""
    def change(m: Manifest) -> Manifest | None:
        if offset > m.log_end_offset:
            raise OffsetError(f"log {handle.name!r}: cannot move the log start to {offset}, beyond the "
                              f"log end offset {m.log_end_offset}")
        if offset <= m.log_start_offset:
            return None
        return move_log_start(handle, m, offset)
    return handle.update(change)


def move_log_start(handle: LogHandle, m: Manifest, offset: int) -> Manifest:
    segs = []
    for i, seg in enumerate(m.segments):
        last = i == len(m.segments) - 1
        if seg.next_offset <= offset and not last:
            continue  # wholly below: deleted
        if seg.base_offset < offset and seg.records:
            seg = restat(handle, seg, offset)
        segs.append(seg)
    holds = tuple(h for h in m.holds if h.offset >= offset)
    return m.with_(segments=tuple(segs), log_start_offset=offset, holds=holds)


def set_checkpoint(handle: LogHandle, offset: int) -> Manifest:
    """Overwrite the stored cleaner checkpoint (an operator action; resets follow SPEC §3)."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise OffsetError(f"checkpoint {offset!r} is not an integer")
    return handle.update(lambda m: m.with_(checkpoint=offset))
