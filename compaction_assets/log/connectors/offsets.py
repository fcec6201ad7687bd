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

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.log.connectors.layouts import Unit
from compaction_assets.log.connectors.columns import Columns, concat

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


def _value_offsets(part: Part, has_field: bool, tombstones: list[Part]) -> tuple[np.ndarray, bool]:
    """A value file's offsets and whether they are exact."""
    n, start, nxt = len(part.batch), part.unit.start, part.next_start
    if has_field:
        if part.batch.offsets.null_count:
            raise InvalidInputError(f"{part.batch.where[part.batch.offsets.is_null().index(True).as_py()]}: "
                                    "no offset (landing.offset.field)")
        return part.batch.offsets.to_numpy(zero_copy_only=False).astype(np.int64), True
    exact = nxt is not None and n == nxt - start
    if nxt is not None and n > nxt - start:
        raise InvalidInputError(f"{part.uri}: {n} records for the {nxt - start} offsets from {start} to the next "
                                f"file's start {nxt}; the files do not match Confluent's naming")
    if not exact and tombstones:
        names = ", ".join(t.unit.name for t in tombstones)
        end = f"before {nxt}" if nxt is not None else "(the partition's last file)"
        raise InvalidInputError(f"{part.uri}: {n} records from offset {start} {end} leave a gap, so their offsets "
                                f"cannot be known, and tombstone file(s) {names} fall among them: set "
                                "landing.offset.field (InsertField$Value offset.field) to land them")
    return np.arange(start, start + n, dtype=np.int64), exact


def _tombstone_offsets(part: Part, taken: np.ndarray) -> np.ndarray:
    """A tombstone file's offsets (see the module's rule); refused when they cannot be known."""
    n, start, nxt = len(part.batch), part.unit.start, part.next_start
    if n <= 1 or (nxt is not None and n == nxt - start):
        return np.arange(start, start + n, dtype=np.int64)
    hi = nxt if nxt is not None else max(start + 1, int(taken.max()) + 1 if taken.size else start + 1)
    span = np.arange(start, hi, dtype=np.int64)
    at = np.searchsorted(taken, span).clip(max=max(taken.size - 1, 0))
    free = span if not taken.size else span[taken[at] != span]     # `taken` sorted: no hashing of every offset
    if nxt is None and free.size < n:
        free = np.concatenate([free, np.arange(hi, hi + n - free.size, dtype=np.int64)])
    if free.size != n or free[0] != start:
        raise InvalidInputError(f"{part.uri}: {n} tombstones for {free.size} offsets the value files leave free "
                                f"from {start} to {hi}: their offsets cannot be known (a gap in the partition)")
    return free


@dataclass
class Piece:
    """Records appended together: a value file's with the tombstones in its offset range (or a whole group)."""
    columns: Columns
    names: list[str]      # recorded in the manifest joined by `|`; `<tombstone file>#<start>` for part of one
    uris: list[str]
    exact: bool

    def done(self, recorded: set[str]) -> bool:
        """Whether an earlier run appended it (a tombstone file recorded whole covers its parts too)."""
        return all(n in recorded or n.split(PART_MARK, 1)[0] in recorded for n in self.names)


PART_MARK = "#"   # Kafka topic names, and so Confluent's object names, never hold it


def partly_recorded(recorded: set[str]) -> set[str]:
    """Tombstone files whose rows an interrupted run appended in part (a piece recorded `<name>#<start>`)."""
    return {n.split(PART_MARK, 1)[0] for n in recorded if PART_MARK in n}


def needed(units: list[Unit], recorded: set[str], nexts: dict[str, int | None]) -> list[Unit]:
    """The pending units, with the ingested value files a partly appended tombstone file's offsets depend on."""
    partly = partly_recorded(recorded)
    spans = [(u.start, _stop(nexts, u)) for u in units if u.name in partly and u.name not in recorded]
    return [u for u in units if u.name not in recorded
            or (not u.tombstone and any(u.start < hi and lo < _stop(nexts, u) for lo, hi in spans))]


def _stop(nexts: dict[str, int | None], unit: Unit) -> int:
    stop = nexts.get(unit.name)
    return INFINITY if stop is None else stop


@dataclass
class _Order:
    """A group's rows (numbered as its parts are concatenated, values first) in offset order."""
    parts: list[Part]
    first_row: np.ndarray    # per part: its first row's number
    part_of: np.ndarray      # per row: its part
    order: np.ndarray        # row numbers in offset order
    offsets: np.ndarray      # the offsets in that order
    exact: bool


def _ordered(parts: list[Part], has_field: bool) -> _Order:
    values = [p for p in parts if not p.unit.tombstone]
    tombs = [p for p in parts if p.unit.tombstone]
    offsets: list[np.ndarray] = []
    exact = True
    for p in values:
        offs, ok = _value_offsets(p, has_field, tombs)
        offsets.append(offs)
        exact = exact and ok
    taken = np.sort(np.concatenate(offsets)) if offsets else np.empty(0, np.int64)
    for p in tombs:
        offsets.append(_tombstone_offsets(p, taken))
    ordered = values + tombs
    sizes = np.array([len(p.batch) for p in ordered], dtype=np.int64)
    allo = np.concatenate(offsets) if offsets else np.empty(0, np.int64)
    order = np.argsort(allo, kind="stable")
    sorted_offs = allo[order]
    dup = np.flatnonzero(sorted_offs[1:] == sorted_offs[:-1])
    if dup.size:
        raise InvalidInputError(f"{parts[0].uri}: two records of the group at offset {sorted_offs[dup[0]]} "
                                f"({', '.join(p.unit.name for p in parts)})")
    return _Order(ordered, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                  np.repeat(np.arange(len(ordered)), sizes), order, sorted_offs, exact)


def _bounds(o: _Order) -> list[int]:
    """Where each value file's piece starts in offset order; one piece when a file's rows leave its range."""
    values = [i for i, p in enumerate(o.parts) if not p.unit.tombstone]
    whole = [0, len(o.order)]
    if len(values) < 2:
        return whole
    bounds = [0] + [int(np.searchsorted(o.offsets, o.parts[i].unit.start)) for i in values[1:]] + [len(o.order)]
    position = np.empty_like(o.order)
    position[o.order] = np.arange(len(o.order))
    for j, i in enumerate(values):
        mine = position[o.first_row[i]:o.first_row[i] + len(o.parts[i].batch)]
        if mine.size and (mine.min() < bounds[j] or mine.max() >= bounds[j + 1]):
            return whole   # explicit offsets beyond the next file's start: the group is appended whole
    return bounds


def _names(o: _Order, bounds: list[int]) -> list[list[str]]:
    """Each piece's recorded names: its value file's, and each tombstone file's, marked when it goes on."""
    pieces = len(bounds) - 1
    names: list[list[str]] = [[] for _ in range(pieces)]
    piece_of = np.searchsorted(np.array(bounds[1:-1], dtype=np.int64), np.arange(len(o.order)), side="right")
    row_piece = np.empty(len(o.order), dtype=np.int64)
    row_piece[o.order] = piece_of
    for i, part in enumerate(o.parts):
        files = [f.name for f in part.unit.files]
        mine = np.unique(row_piece[o.first_row[i]:o.first_row[i] + len(part.batch)])
        if pieces == 1 or not part.unit.tombstone:   # values come first: value file i is piece i's
            names[0 if pieces == 1 else i] += files
            continue
        if not mine.size:   # no rows: recorded with the piece its start falls in
            at = np.searchsorted(o.offsets, part.unit.start)
            mine = np.searchsorted(np.array(bounds[1:-1], dtype=np.int64), [at], side="right")
        for k in mine[:-1]:   # marked by the piece's value file: the same whichever files a re-run reads
            names[int(k)] += [f"{n}{PART_MARK}{o.parts[int(k)].unit.start}" for n in files]
        names[int(mine[-1])] += files
    return names


def pieces(parts: list[Part], has_field: bool) -> list[Piece]:
    """The group's records in offset order, offsets set, cut before each value file (see `Piece`)."""
    o = _ordered(parts, has_field)
    tomb = np.array([p.unit.tombstone for p in o.parts])[o.part_of][o.order]
    real = np.array([p.batch.mtime_timestamps == 0 for p in o.parts])[o.part_of][o.order]
    # A tombstone carries no inserted field: its object's mtime can be years after the values' own
    # times, which would roll a segment at every delete and date the delete long after it happened.
    # The record before it in the partition (carried over runs of tombstones) is the closest time that the
    # data itself gives.
    rows = np.arange(len(o.order))
    dated_by = np.maximum.accumulate(np.where(tomb & (rows > 0), 0, rows))
    redated = tomb & (rows > 0) & real[dated_by]
    stamps = pa.concat_arrays([p.batch.timestamps.cast(pa.int64()) for p in o.parts]) if o.parts else pa.array([], pa.int64())
    from_mtime = np.zeros(len(o.order), dtype=np.int64)   # per row number: records timed by their object's mtime
    for i, p in enumerate(o.parts):
        if p.batch.mtime_timestamps == len(p.batch):
            from_mtime[o.first_row[i]:o.first_row[i] + len(p.batch)] = 1
        elif p.batch.mtime_timestamps:    # some rows: counted with the piece of the file's first row
            from_mtime[o.first_row[i]] = p.batch.mtime_timestamps
    bounds = _bounds(o)
    out = []
    for (lo, hi), names in zip(zip(bounds, bounds[1:]), _names(o, bounds)):
        rows_here = o.order[lo:hi]
        cols = _take(o, rows_here)
        cols = replace(cols, offsets=pa.array(o.offsets[lo:hi], pa.int64()),
                       timestamps=stamps.take(pa.array(o.order[dated_by[lo:hi]])),
                       mtime_timestamps=int(from_mtime[rows_here].sum() - redated[lo:hi].sum()))
        used = sorted({int(i) for i in np.unique(o.part_of[rows_here])}) or [0]
        out.append(Piece(cols, names, [o.parts[i].uri for i in used], o.exact))
    return out


def _take(o: _Order, rows: np.ndarray) -> Columns:
    """The rows (numbers of the group) as one batch, copied only when they are not one part's rows in order."""
    used = np.unique(o.part_of[rows]) if rows.size else np.array([0])
    if used.size == 1:
        part = o.parts[int(used[0])].batch
        local = rows - o.first_row[int(used[0])]
        if len(local) == len(part) and (local.size == 0 or (local == np.arange(len(part))).all()):
            return part
    batch = concat([o.parts[int(i)].batch for i in used])
    base = np.zeros(len(o.parts), dtype=np.int64)
    base[used] = np.concatenate([[0], np.cumsum([len(o.parts[int(i)].batch) for i in used])[:-1]])
    part = o.part_of[rows]
    return replace(batch.take(rows - o.first_row[part] + base[part]), schema=batch.schema)
