"""A batch's records as SPEC §1 stores them: offsets assigned and checked, timestamps checked, the roll points."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import InvalidInputError
from compaction_assets.segments.records import with_derived_columns


def assign_offsets(explicit: pa.Array, leo: int, source: str) -> np.ndarray:
    """Offsets of a batch: explicit ones must be strictly increasing and >= LEO; the rest follow on."""
    n = len(explicit)
    if explicit.null_count == n:
        return np.arange(leo, leo + n, dtype=np.int64)
    if explicit.null_count == 0:
        offs = explicit.to_numpy().astype(np.int64)
        if offs[0] < leo:
            raise InvalidInputError(
                f"{source}: offset {offs[0]} is below the log end offset {leo} (offsets must be >= LEO)", row=0
            )
        bad = np.flatnonzero(offs[1:] <= offs[:-1])
        if bad.size:
            i = int(bad[0]) + 1
            raise InvalidInputError(
                f"{source}: offset {offs[i]} follows offset {offs[i - 1]} (offsets must be strictly increasing)", row=i
            )
        return offs
    out = np.empty(n, dtype=np.int64)
    nxt = leo
    for i, off in enumerate(explicit.to_pylist()):
        if off is None:
            off = nxt
        elif off < nxt:
            raise InvalidInputError(
                f"{source}: offset {off} is below the next offset {nxt} (offsets must be strictly "
                "increasing and >= the log end offset)",
                row=i,
            )
        out[i] = off
        nxt = off + 1
    return out


def find_rolls(
    sizes: np.ndarray, ts: np.ndarray, active_size: int, active_min_ts: int | None, segment_bytes: int, interval_ms: int
) -> list[int]:
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


def plan_batch(
    explicit: pa.Array,
    null_keys: np.ndarray,
    timestamps: pa.Array,
    leo: int,
    now: int | None,
    drop_invalid: bool,
    source: str,
):
    """Offsets and timestamps of a batch, checked (SPEC §1). Returns (keep mask or None, offsets,
    timestamps, invalid count); raises InvalidInputError naming the source and offset."""
    offsets = assign_offsets(explicit, leo, source)
    invalid = int(null_keys.sum())
    keep = None
    rows = np.arange(len(null_keys))  # batch row of each record still in play
    if invalid and not drop_invalid:
        first = int(np.flatnonzero(null_keys)[0])
        raise InvalidInputError(
            f"{source}: record at offset {offsets[first]} has a null key; a compacted log needs keyed "
            f"records ({invalid} such record(s); nothing of this batch was written)",
            row=first,
        )
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
            raise InvalidInputError(
                f"{source}: record at offset {offsets[first]} has no timestamp", row=int(rows[first])
            )
        timestamps = pc.fill_null(timestamps, now)
    ts = timestamps.to_numpy().astype(np.int64) if len(timestamps) else np.empty(0, np.int64)
    neg = np.flatnonzero(ts < 0)
    if neg.size:
        raise InvalidInputError(
            f"{source}: record at offset {offsets[neg[0]]} has a negative timestamp {ts[neg[0]]}", row=int(rows[neg[0]])
        )
    return keep, offsets, ts, invalid


def validate(table: pa.Table, leo: int, now: int | None, drop_invalid: bool, source: str):
    """A batch's records as stored (offsets, timestamps, derived columns) and its invalid count (SPEC §1)."""
    null_keys = pc.is_null(table.column("key")).to_numpy(zero_copy_only=False)
    keep, offsets, ts, invalid = plan_batch(
        _array(table.column("offset")), null_keys, _array(table.column("timestamp")), leo, now, drop_invalid, source
    )
    if keep is not None:
        table = table.filter(pa.array(keep))
    out = with_derived_columns(
        pa.table(
            {
                "offset": pa.array(offsets, pa.int64()),
                "key": table.column("key").cast(pa.binary()),
                "value": table.column("value"),
                "timestamp": pa.array(ts, pa.int64()),
                "headers": table.column("headers"),
                "delete_horizon": pa.nulls(len(table), pa.int64()),
            }
        )
    )
    return out, invalid


def _array(col) -> pa.Array:
    return col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
