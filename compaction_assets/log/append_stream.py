"""One append of a batch that arrives in pieces (a landed group read a file at a time), all or nothing.

Each piece is validated and written as `writer.append` writes a batch, the roll rules applied with the active
segment carried from piece to piece, so the segments are those of one big append; a segment that spans pieces
gets a file per piece. One `commit_append` then records every piece under the batch's ingest name: until it,
no file written is referenced, and a fault, bad input or a concurrent roll deletes them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import pyarrow as pa

from compaction_assets.errors import ConflictError, InvalidInputError
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import FileRef, Hold, Manifest, merge_horizons
from compaction_assets.log.records import sizes_array
from compaction_assets.log.segment_stats import chunk_stats
from compaction_assets.log.store import LogHandle
from compaction_assets.log.writer import (APPEND_ATTEMPTS, AppendResult, commit_append, find_rolls, new_holds,
                                          validate, write_file)


@dataclass
class Piece:
    """Records of the batch in offset order (INPUT_SCHEMA), and the name of each row for errors."""
    table: pa.Table
    row_name: Callable[[int], str]


@dataclass
class _Progress:
    """What the pieces written so far leave: the next offset, the active segment, the chunks to commit."""
    next_offset: int
    active_size: int
    active_min_ts: int | None
    chunks: list[tuple[int, list[FileRef], dict]] = field(default_factory=list)
    written: list[FileRef] = field(default_factory=list)
    holds: dict[int, Hold] = field(default_factory=dict)
    records: int = 0
    first_offset: int | None = None
    invalid: int = 0
    rolls: int = 0


def combine_stats(first: dict, second: dict) -> dict:
    """Stats of two chunks of records, the second after the first (as `chunk_stats` of both together)."""
    def pick(a, b, f):
        return b if a is None else a if b is None else f(a, b)
    return dict(records=first["records"] + second["records"], size=first["size"] + second["size"],
                min_ts=pick(first["min_ts"], second["min_ts"], min), max_ts=pick(first["max_ts"], second["max_ts"], max),
                first_ts=first["first_ts"] if first["records"] else second["first_ts"],
                min_pos_ts=pick(first["min_pos_ts"], second["min_pos_ts"], min),
                tombstones=first["tombstones"] + second["tombstones"],
                horizons=merge_horizons(first["horizons"], second["horizons"]))


def _write_piece(handle: LogHandle, config: TopicConfig, base: Manifest, piece: Piece, done: _Progress, *,
                 now: int | None, drop_invalid: bool, source: str) -> None:
    """Validate and write one piece, its chunks added to `done` (the first continues the open segment)."""
    try:
        records, invalid = validate(piece.table, done.next_offset, now, drop_invalid, source)
    except InvalidInputError as exc:
        if exc.row is None or not str(exc).startswith(source + ": "):
            raise
        raise InvalidInputError(f"{piece.row_name(exc.row)}: {str(exc)[len(source) + 2:]}", row=exc.row) from None
    done.invalid += invalid
    if len(records) == 0:
        return
    offsets = records.column("offset").to_numpy()
    sizes, stamps = sizes_array(records).to_numpy(), records.column("timestamp").to_numpy()
    rolls = find_rolls(sizes, stamps, done.active_size, done.active_min_ts, config.segment_bytes,
                       config.roll_interval_ms)
    bounds = [0, *rolls, len(records)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        rows = records.slice(a, b - a)
        refs = [write_file(handle, rows)] if len(rows) else []   # a roll before the first record: no file
        done.written += refs
        stats = chunk_stats(rows)
        if i == 0 and done.chunks:
            first, old_refs, old_stats = done.chunks[-1]
            done.chunks[-1] = (first, old_refs + refs, combine_stats(old_stats, stats))
        else:
            done.chunks.append((int(offsets[a]), refs, stats))
    # the active segment as find_rolls leaves it: opened at the last roll, or the one before grown
    opened = len(bounds) > 2 or done.active_min_ts is None
    tail = slice(bounds[-2], None)
    done.active_size = (0 if opened else done.active_size) + int(sizes[tail].sum())
    low = int(stamps[tail].min())
    done.active_min_ts = low if opened else min(done.active_min_ts, low)
    for hold in new_holds(handle, base, config, records):
        kept = done.holds.get(hold.offset)
        done.holds[hold.offset] = hold if kept is None or kept.until < hold.until else kept
    done.first_offset = int(offsets[0]) if done.first_offset is None else done.first_offset
    done.next_offset = int(offsets[-1]) + 1
    done.records += len(records)
    done.rolls += len(rolls)


def append_pieces(handle: LogHandle, config: TopicConfig, pieces: Callable[[], Iterator[Piece]], *,
                  ingest_name: str, source: str, now: int | None = None,
                  drop_invalid: bool = False) -> AppendResult:
    """Append the pieces `pieces()` gives as one batch with `writer.append`'s rules and result; all or nothing."""
    with handle.lock("append", purpose=f"append from {source}"):
        for attempt in range(APPEND_ATTEMPTS):
            base = handle.manifest()
            if ingest_name in base.ingested:
                return AppendResult(0, None, None, 0, 0, base.log_end_offset, already_ingested=True)
            active = base.active
            done = _Progress(base.log_end_offset, active.size, active.min_ts if not active.empty else None)
            try:
                for piece in pieces():
                    _write_piece(handle, config, base, piece, done, now=now, drop_invalid=drop_invalid,
                                 source=source)
                if done.records == 0:
                    handle.update(lambda m: m.with_(invalid_records=m.invalid_records + done.invalid,
                                                    ingested=m.ingested + (ingest_name,)))
                    return AppendResult(0, None, None, done.invalid, 0, base.log_end_offset)
                commit_append(handle, base, done.chunks, done.next_offset, done.invalid,
                              tuple(done.holds[o] for o in sorted(done.holds)), ingest_name)
                break
            except ConflictError:
                # a cleaning's evaluation sealed the active segment meanwhile: the rolls are planned again
                _delete(handle, done.written)
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
            except BaseException:
                _delete(handle, done.written)
                raise
    return AppendResult(done.records, done.first_offset, done.next_offset - 1, done.invalid, done.rolls,
                        done.next_offset)


def _delete(handle: LogHandle, refs: Iterable[FileRef]) -> None:
    """Files written for an append that was not committed (none is referenced)."""
    for ref in refs:
        handle.st.delete(handle.path(ref.name))
