"""Confluent's offsets: which files are ingested together, and the offset of every record in them.

Confluent's S3 sink writes no offset per record: a file is named by its first record's offset. The
offsets of a value file are known when `landing.offset.field` names the field `InsertField$Value` added,
or when the file has no gap (its records fill the range up to the next value file's start). Its
tombstones are in other files (`tombstone/`), rotated with the values, so their offsets fall inside the
values' ranges: a tombstone file's offsets are its start when it holds one record, its range when it has no
gap, else the offsets the value files leave free in its range (when exactly as many are free as it holds
records). Files whose ranges overlap are ingested as one batch in offset order; when that needs offsets
that cannot be known, the ingestion is refused naming the file and `landing.offset.field`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.layouts import Unit
from compaction_assets.ingest.connectors.shaping.columns import Columns, concat, take_headers

INFINITY = 2**63


@dataclass
class Part:
    """A unit read: its records and the start of the next file of its kind (None: the last)."""

    unit: Unit
    batch: Columns
    next_start: int | None
    uri: str


def next_starts(units: list[Unit]) -> dict[str, int | None]:
    """For each unit, the start of the next unit of its kind (values, or tombstones)."""
    out: dict[str, int | None] = {}
    for tomb in (False, True):
        kind = sorted((u for u in units if u.tombstone == tomb), key=lambda u: u.start)
        for a, b in zip(kind, kind[1:] + [None]):
            out[a.name] = b.start if b is not None else None
    return out


def groups(pending: list[Unit], nexts: dict[str, int | None]) -> list[list[Unit]]:
    """Pending units whose offset ranges overlap, grouped, in offset order."""
    out: list[list[Unit]] = []
    end = -1
    for u in sorted(pending, key=lambda u: (u.start, u.tombstone)):
        stop = nexts.get(u.name)
        stop = INFINITY if stop is None else stop
        if out and u.start < end:
            out[-1].append(u)
            end = max(end, stop)
        else:
            out.append([u])
            end = stop
    return out


@dataclass
class Extent:
    """What a unit's offsets need: its row count, its `landing.offset.field` values, and the name of a row."""

    unit: Unit
    rows: int
    explicit: pa.Array | None  # int64 offsets with landing.offset.field
    next_start: int | None
    uri: str
    row_name: Callable[[int], str]

    @classmethod
    def of(cls, part: Part) -> Extent:
        """A read unit's extent."""
        return cls(
            part.unit, len(part.batch), part.batch.offsets, part.next_start, part.uri, part.batch.where.__getitem__
        )


def _value_offsets(part: Extent, has_field: bool, tombstones: list[Extent]) -> tuple[np.ndarray, bool]:
    """A value file's offsets and whether they are exact."""
    n, start, nxt = part.rows, part.unit.start, part.next_start
    if has_field:
        assert part.explicit is not None  # with landing.offset.field, every extent carries the field's values
        if part.explicit.null_count:
            raise InvalidInputError(
                f"{part.row_name(part.explicit.is_null().index(True).as_py())}: no offset (landing.offset.field)"
            )
        return part.explicit.to_numpy(zero_copy_only=False).astype(np.int64), True
    exact = nxt is not None and n == nxt - start
    if nxt is not None and n > nxt - start:
        raise InvalidInputError(
            f"{part.uri}: {n} records for the {nxt - start} offsets from {start} to the next "
            f"file's start {nxt}; the files do not match Confluent's naming"
        )
    if not exact and tombstones:
        names = ", ".join(t.unit.name for t in tombstones)
        end = f"before {nxt}" if nxt is not None else "(the partition's last file)"
        raise InvalidInputError(
            f"{part.uri}: {n} records from offset {start} {end} leave a gap, so their offsets "
            f"cannot be known, and tombstone file(s) {names} fall among them: set "
            "landing.offset.field (InsertField$Value offset.field) to land them"
        )
    return np.arange(start, start + n, dtype=np.int64), exact


def _tombstone_offsets(part: Extent, taken: np.ndarray) -> np.ndarray:
    """A tombstone file's offsets (see the module's rule); refused when they cannot be known."""
    n, start, nxt = part.rows, part.unit.start, part.next_start
    if n <= 1 or (nxt is not None and n == nxt - start):
        return np.arange(start, start + n, dtype=np.int64)
    hi = nxt if nxt is not None else max(start + 1, int(taken.max()) + 1 if taken.size else start + 1)
    span = np.arange(start, hi, dtype=np.int64)
    low, high = np.searchsorted(taken, [start, hi])  # `taken` sorted: only the values in the range
    used = np.zeros(span.size, dtype=bool)
    used[taken[low:high] - start] = True  # a mark per offset, not a search per offset
    free = span[~used]
    if nxt is None and free.size < n:
        free = np.concatenate([free, np.arange(hi, hi + n - free.size, dtype=np.int64)])
    if free.size != n or free[0] != start:
        raise InvalidInputError(
            f"{part.uri}: {n} tombstones for {free.size} offsets the value files leave free "
            f"from {start} to {hi}: their offsets cannot be known (a gap in the partition)"
        )
    return free


def plan_offsets(values: list[Extent], tombs: list[Extent], has_field: bool) -> tuple[list[np.ndarray], bool]:
    """The offsets of a group's value files then its tombstone files, checked unique; and whether all are exact."""
    offsets: list[np.ndarray] = []
    exact = True
    for p in values:
        offs, ok = _value_offsets(p, has_field, tombs)
        offsets.append(offs)
        exact = exact and ok
    # stable: a merge of the files' already sorted runs, near linear where the default sort is not
    taken = np.sort(np.concatenate(offsets), kind="stable") if offsets else np.empty(0, np.int64)
    offsets += [_tombstone_offsets(p, taken) for p in tombs]
    dead = np.sort(np.concatenate(offsets[len(values) :])) if tombs else np.empty(0, np.int64)
    # the few tombstones checked against the values, not every offset sorted once more
    hit = np.searchsorted(taken, dead)
    clashes = [
        taken[1:][taken[1:] == taken[:-1]],
        dead[1:][dead[1:] == dead[:-1]],
        dead[(hit < taken.size) & (taken[np.minimum(hit, max(taken.size - 1, 0))] == dead)] if taken.size else dead[:0],
    ]
    found = [int(c.min()) for c in clashes if c.size]
    if found and len(values) + len(tombs) > 1:  # one file's own repeats: the append names them
        parts = values + tombs
        raise InvalidInputError(
            f"{parts[0].uri}: two records of the group at offset {min(found)} ({', '.join(p.unit.name for p in parts)})"
        )
    return offsets, exact


def merge(parts: list[Part], has_field: bool) -> tuple[Columns, bool]:
    """The group's records in offset order, offsets set; and whether every offset is exact."""
    values = [p for p in parts if not p.unit.tombstone]
    tombs = [p for p in parts if p.unit.tombstone]
    offsets, exact = plan_offsets([Extent.of(p) for p in values], [Extent.of(p) for p in tombs], has_field)
    return place(values + tombs, offsets), exact


def place(ordered: list[Part], offsets: list[np.ndarray]) -> Columns:
    """Value files' then tombstone files' records, given their offsets, in offset order, tombstones dated."""
    values = [p for p in ordered if not p.unit.tombstone]
    allo = np.concatenate(offsets) if offsets else np.empty(0, np.int64)
    if len(ordered) == 1:  # one file: already in offset order
        return replace(ordered[0].batch, offsets=pa.array(allo, pa.int64()))
    order = np.argsort(allo, kind="stable")
    if len(order) < 2**31:  # row positions in half the bytes: the merge's temporaries are most of its memory
        order = order.astype(np.int32)
    sorted_offs = allo[order]
    tomb = order >= sum(len(p.batch) for p in values)  # rows of tombstone files (after the value files')
    placed = values_in_order([p.batch.values for p in ordered], order, tomb)  # in offset order already
    whole = concat([p.batch for p in ordered], pa.array(allo, pa.int64()), placed)
    real = _own_times(ordered, order, tomb)
    # A tombstone carries no inserted field: its object's mtime can be years after the values' own
    # times, which would roll a segment at every delete and date the delete long after it happened.
    # The record before it in the partition (carried over runs of tombstones) is the closest time that the
    # data itself gives.
    rows = np.arange(len(order), dtype=order.dtype)
    dated_by = np.maximum.accumulate(np.where(tomb & (rows > 0), 0, rows))
    source = order[dated_by]
    dated = int((tomb & (rows > 0) & real[dated_by]).sum())  # tombstones dated by a record with its own time
    idx = pa.array(order)
    return Columns(
        whole.keys.take(idx),
        whole.values.take(idx) if placed is None else placed,
        whole.structured.take(idx),
        pa.array(sorted_offs, pa.int64()),
        whole.timestamps.take(pa.array(source)),
        take_headers(whole.headers, idx),
        whole.where.take(order),
        whole.mtime_timestamps - dated,
        whole.schema,
    )  # same rows, reordered


def _own_times(ordered: list[Part], order: np.ndarray, tomb: np.ndarray) -> np.ndarray:
    """Per row in offset order: whether its file's records carry their own timestamps (no object mtime)."""
    own = [p.batch.mtime_timestamps == 0 for p in ordered]
    if own == [not p.unit.tombstone for p in ordered]:  # the usual case: values timed, tombstones not
        return ~tomb
    return np.repeat(own, [len(p.batch) for p in ordered])[order]


def values_in_order(files: list[pa.Array], order: np.ndarray, tomb: np.ndarray) -> pa.ChunkedArray | None:
    """The files' values concatenated and taken in `order`, without copying their bytes: one chunk per value
    file (first in `files`), over its rows and the tombstones before the next file's first row, when the
    value rows keep their order and the tombstones' values (after them) are null: the tombstones only add
    empty slots. None when that does not hold (the caller concatenates and takes)."""
    live = ~tomb
    count = int(live.sum())
    ends = np.cumsum([0] + [len(f) for f in files])
    split = int(np.searchsorted(ends, count))
    if (
        any(f.type != pa.binary() for f in files)
        or ends[split] != count
        or any(f.null_count != len(f) for f in files[split:])
    ):
        return None
    kept = order[live]  # the value rows, which are 0..count-1: in their order when it only rises
    if count and (kept[0] != 0 or not (kept[1:] > kept[:-1]).all()):
        return None
    filled = [f for f in files[:split] if len(f)]
    if not filled:
        return pa.chunked_array([pa.nulls(len(order), pa.binary())])
    starts = np.cumsum([0] + [len(f) for f in filled])[1:-1]
    bounds = [0, *np.flatnonzero(live)[starts].tolist(), len(order)]  # where each value file's chunk starts
    return pa.chunked_array([_placed(f, live[a:b]) for f, a, b in zip(filled, bounds, bounds[1:])], pa.binary())


def _placed(values: pa.Array, live: np.ndarray) -> pa.Array:
    """`values` at the rows where `live` is set, null elsewhere, over the same bytes."""
    ends = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset : values.offset + len(values) + 1]
    taken = np.cumsum(live, dtype=np.int32)  # value rows up to and including each row
    offsets = np.concatenate([ends[:1], ends[taken]]).astype(np.int32)
    valid = live.copy()
    valid[live] = values.is_valid().to_numpy(zero_copy_only=False)
    data = values.buffers()[2] if values.buffers()[2] is not None else pa.py_buffer(b"")
    return pa.Array.from_buffers(
        pa.binary(),
        len(live),
        [pa.py_buffer(np.packbits(valid, bitorder="little")), pa.py_buffer(offsets), data],
        null_count=int(len(live) - valid.sum()),
    )
