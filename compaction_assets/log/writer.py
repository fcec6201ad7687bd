"""Writing to a log: append with the roll rules, roll, log-start moves and checkpoint overwrites (SPEC §1).

An append is one code path whether its batch comes whole or in pieces (a landed group read a file at a time):
each piece is validated and written with the active segment carried from piece to piece, so the segments are
those of one table; a segment that spans pieces gets a file per piece. One `commit_append` records them all
(with the batch's ingest name, if any): until it no file written is referenced, so bad input, a fault before
it or a concurrent roll deletes them all; a failed commit keeps them (it may have been written; if not, the
garbage collection removes them).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import ConflictError, InvalidInputError, OffsetError, StorageError
from compaction_assets.log.batch_rules import find_rolls, validate
from compaction_assets.log.read_ahead import ReadAhead
from compaction_assets.log.reader import dead_offsets, restat
from compaction_assets.log.spark_reads import ship_by_value
from compaction_assets.log.strategies import strategy_of
from compaction_assets.segments import segment_task, worker_files
from compaction_assets.segments.records import coerce_table, sizes_array
from compaction_assets.segments.segment_stats import add_chunk, chunk_stats, combine_stats
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Hold, Manifest, Segment, new_id
from compaction_assets.topics.config import TopicConfig

APPEND_ATTEMPTS = 5  # an append is re-planned when a concurrent evaluation sealed the active segment


@dataclass
class AppendResult:
    records: int
    first_offset: int | None
    last_offset: int | None
    invalid_records: int
    segments_rolled: int
    log_end_offset: int
    already_ingested: bool = False


def write_file(handle: LogHandle, table: pa.Table) -> FileRef:
    """Records written as a new data file of the log (referenced once a commit names it)."""
    name = handle.new_data_name()
    handle.st.write_parquet(handle.path(name), table, **segment_task.SEGMENT_OPTIONS)
    return FileRef(name=name, records=len(table))


@dataclass
class Piece:
    """Records of a batch in offset order (INPUT_SCHEMA); `row_name` names a row in errors (else the source)."""

    table: pa.Table
    row_name: Callable[[int], str] | None = None


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


def append(
    handle: LogHandle,
    config: TopicConfig,
    data: Any,
    *,
    now: int | None = None,
    drop_invalid: bool = False,
    source: str = "input",
    ingest_name: str | None = None,
    row_name: Callable[[int], str] | None = None,
) -> AppendResult:
    """Append a batch (Arrow table, pandas DataFrame or dicts) with SPEC §1's rules; all or nothing.

    With `ingest_name` (a landing file), the name is recorded in the same commit and a second append
    with the same name is a no-op, so re-running an ingestion never appends a file twice.
    """
    table = coerce_table(data, source)
    return append_pieces(
        handle,
        config,
        lambda: iter([Piece(table, row_name)]),
        now=now,
        drop_invalid=drop_invalid,
        source=source,
        ingest_name=ingest_name,
    )


def append_pieces(
    handle: LogHandle,
    config: TopicConfig,
    pieces: Callable[[], Iterator[Piece]],
    *,
    source: str,
    ingest_name: str | None = None,
    now: int | None = None,
    drop_invalid: bool = False,
    read_ahead: bool = False,
) -> AppendResult:
    """Append the pieces `pieces()` gives as one batch (one commit, segments as one table's); all or nothing.
    With `read_ahead`, the next piece is read in a thread while this one is written (see read_ahead.py)."""
    with handle.lock("append", purpose=f"append from {source}"):
        for attempt in range(APPEND_ATTEMPTS):
            base = handle.manifest()
            if ingest_name is not None and ingest_name in base.ingested:
                return AppendResult(0, None, None, 0, 0, base.log_end_offset, already_ingested=True)
            active = base.active
            done = _Progress(base.log_end_offset, active.size, active.min_ts if not active.empty else None)
            try:
                # pieces() is called again on each attempt: a piece is read when it is (about to be) written
                with ReadAhead(pieces()) if read_ahead else nullcontext(pieces()) as each:
                    for piece in each:
                        _write_piece(
                            handle, config, base, piece, done, now=now, drop_invalid=drop_invalid, source=source
                        )
            except BaseException:
                _delete(handle, done.written)  # bad input or a fault before the commit: no file is referenced
                raise
            if done.records == 0:
                handle.update(_nothing_appended(done.invalid, ingest_name))
                return AppendResult(0, None, None, done.invalid, 0, base.log_end_offset)
            try:
                commit_append(
                    handle,
                    base,
                    done.chunks,
                    done.next_offset,
                    done.invalid,
                    tuple(done.holds[o] for o in sorted(done.holds)),
                    ingest_name,
                )
                break
            except ConflictError:
                # A cleaning's evaluation sealed the active segment meanwhile (a deadline roll): the roll
                # rules must be applied again to the new active segment. Our files are not referenced (our own
                # commit whose reply was lost reads back as ours in the store, never as a conflict).
                # Any other failure of the commit keeps them: the manifest may have been written.
                _delete(handle, done.written)
                if attempt == APPEND_ATTEMPTS - 1:
                    raise
    return AppendResult(
        done.records, done.first_offset, done.next_offset - 1, done.invalid, done.rolls, done.next_offset
    )


def _nothing_appended(invalid: int, ingest_name: str | None) -> Callable[[Manifest], Manifest]:
    """The change a batch without a valid record commits: its invalid records counted, its name (if any)
    recorded as ingested."""
    return lambda m: m.with_(
        invalid_records=m.invalid_records + invalid,
        ingested=m.ingested + ((ingest_name,) if ingest_name else ()),
    )


def _write_piece(
    handle: LogHandle,
    config: TopicConfig,
    base: Manifest,
    piece: Piece,
    done: _Progress,
    *,
    now: int | None,
    drop_invalid: bool,
    source: str,
) -> None:
    """Validate and write one piece, its chunks added to `done` (the first continues the open segment)."""
    try:
        records, invalid = validate(piece.table, done.next_offset, now, drop_invalid, source)
    except InvalidInputError as exc:
        if piece.row_name is None or exc.row is None or not str(exc).startswith(source + ": "):
            raise
        raise InvalidInputError(f"{piece.row_name(exc.row)}: {str(exc)[len(source) + 2 :]}", row=exc.row) from None
    done.invalid += invalid
    if len(records) == 0:
        return
    offsets = records.column("offset").to_numpy()
    sizes, stamps = sizes_array(records).to_numpy(), records.column("timestamp").to_numpy()
    rolls = find_rolls(
        sizes, stamps, done.active_size, done.active_min_ts, config.segment_bytes, config.roll_interval_ms
    )
    bounds = [0, *rolls, len(records)]
    for i, (a, b) in enumerate(itertools.pairwise(bounds)):
        rows = records.slice(a, b - a)
        refs = [write_file(handle, rows)] if len(rows) else []  # a roll before the first record: no file
        done.written += refs
        stats = chunk_stats(rows)
        if i == 0 and done.chunks:  # the open segment goes on from the previous piece
            first, old_refs, old_stats = done.chunks[-1]
            done.chunks[-1] = (first, old_refs + refs, combine_stats(old_stats, stats))
        else:
            done.chunks.append((int(offsets[a]), refs, stats))
    # the active segment as find_rolls leaves it: opened at the last roll, or the one before grown
    opened = len(bounds) > 2 or done.active_min_ts is None
    tail = slice(bounds[-2], None)
    done.active_size = (0 if opened else done.active_size) + int(sizes[tail].sum())
    low = int(stamps[tail].min())
    done.active_min_ts = low if opened or done.active_min_ts is None else min(done.active_min_ts, low)
    for hold in new_holds(handle, base, config, records):
        kept = done.holds.get(hold.offset)
        done.holds[hold.offset] = hold if kept is None or kept.until < hold.until else kept
    done.first_offset = int(offsets[0]) if done.first_offset is None else done.first_offset
    done.next_offset = int(offsets[-1]) + 1
    done.records += len(records)
    done.rolls += len(rolls)


def _delete(handle: LogHandle, refs: Iterable[FileRef]) -> None:
    """Delete files written for an append that was not committed (none is referenced)."""
    for ref in refs:
        try:
            handle.st.delete(handle.path(ref.name))
        except (StorageError, OSError):
            return  # the store fails too: the caller sees the first fault, the garbage collection the files


def commit_append(
    handle: LogHandle,
    base: Manifest,
    chunks: list[tuple[int, list[FileRef], dict]],
    leo: int,
    invalid: int,
    holds: tuple[Hold, ...],
    ingest_name: str | None = None,
) -> Manifest:
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
        changes: dict[str, Any] = dict(
            segments=tuple(segs),
            log_end_offset=leo,
            invalid_records=manifest.invalid_records + invalid,
            holds=manifest.holds + holds,
        )
        if ingest_name is not None:
            changes["ingested"] = manifest.ingested + (ingest_name,)
        if starts_log:
            changes.update(log_start_offset=first_offset, checkpoint=first_offset)
        return manifest.with_(**changes)

    return handle.update(change)


def new_holds(handle: LogHandle, manifest: Manifest, config: TopicConfig, records: pa.Table) -> tuple[Hold, ...]:
    """Kept tombstones that appended records would lose to (the strategies with a guard, SPEC §6)."""
    strategy = strategy_of(config)
    if not strategy.needs_guard or not manifest.tombstone_index or not manifest.tombstone_index.get("count"):
        return ()
    from compaction_assets.log.strategies import losers_to_tombstones  # local import: only these strategies need it

    idx = handle.st.read_parquet(handle.path(manifest.tombstone_index["file"]))
    idx = idx.filter(pc.greater_equal(idx.column("offset"), manifest.log_start_offset))  # gone below log start
    found = losers_to_tombstones(idx, records, strategy)
    return tuple(Hold(offset=o, horizon=h, until=u) for o, h, u in found)


def roll(handle: LogHandle) -> Manifest:
    """Seal the active segment at the log end offset (a no-op when it is empty)."""

    def change(manifest: Manifest) -> Manifest | None:
        if manifest.active.empty:
            return None
        sealed = Segment(**{**manifest.active.__dict__, "next_offset": manifest.log_end_offset})
        return manifest.with_(
            segments=manifest.segments[:-1]
            + (sealed, Segment(new_id(), manifest.log_end_offset, manifest.log_end_offset))
        )

    return handle.update(change)


def set_log_start(handle: LogHandle, offset: int) -> Manifest:
    """Move log_start_offset up to `offset` (SPEC §1): whole segments below it go; refused beyond LEO."""

    def change(manifest: Manifest) -> Manifest | None:
        if offset > manifest.log_end_offset:
            raise OffsetError(
                f"log {handle.name!r}: cannot move the log start to {offset}, beyond the "
                f"log end offset {manifest.log_end_offset}"
            )
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
    return manifest.with_(segments=tuple(segs), log_start_offset=offset, holds=holds, removals=manifest.removals + 1)


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
    ship_by_value()
    runner = worker_files.file_writer(handle.st.filesystem_spec(), handle.path(relative), partition_by)
    df.mapInArrow(runner, "path string, rows long").collect()
