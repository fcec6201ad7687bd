"""The changes an evaluation commits to a log's manifest (SPEC §1, §3, §5, §6), each applied to the newest
manifest and tried again on a newer one after losing to another writer: the preparation before a cleaning
(deadline roll, checkpoint reset, expired remembered deletes), the cleaning's output, retention, and the
uncleanable mark a failed cleaning leaves for an operator to clear, with the failure in one line (Kafka
keeps the checkpoint and the mark in its `LogCleanerManager`, beside the cleaner itself).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from compaction_assets.cleaning.cleaner import CleanOutput
from compaction_assets.errors import ConflictError, first_line
from compaction_assets.log.side_tables import expire_remembered
from compaction_assets.planning.planner import Evaluation, Reason, evaluate, seal_active
from compaction_assets.store.log_store import LogHandle, wall_ms
from compaction_assets.store.manifest import EngineFaults, LastCleaning, Manifest, Segment, Uncleanable
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class Retention:
    """What retention removed (SPEC §6): the oldest segments, their records and bytes, the new log start."""

    segments: int
    records: int
    bytes: int
    log_start_offset: int


def _commit(handle: LogHandle, change: Callable[[Manifest], Manifest | None]) -> Manifest:
    """`change` applied to the newest manifest and committed, tried again on the newer one after losing to
    another writer: the loop of `LogHandle.update`, run here so that the log store never calls back into
    the cleaning (its tries are `attempts`, each committed by `commit`)."""
    for attempt in handle.attempts():
        committed = handle.commit(attempt, change(attempt.current))
        if committed is not None:
            return committed
    raise AssertionError("attempts() raises ConflictError once its tries are spent")


def prepare(handle: LogHandle, config: TopicConfig, now: int) -> tuple[Manifest, Evaluation]:
    """The evaluation's own changes (deadline roll, checkpoint reset, expired remembered deletes) committed;
    the manifest after them and its evaluation."""

    def change(manifest: Manifest) -> Manifest | None:
        ev = evaluate(manifest, config, now)
        new = seal_active(manifest) if ev.deadline_roll else manifest
        if new.checkpoint != ev.first_dirty_offset:
            new = new.with_(checkpoint=ev.first_dirty_offset)
        if ev.remembered_expired and new.remembered is not None:
            new = new.with_(remembered=expire_remembered(handle, new.remembered, now))
        return None if new is manifest else new

    m = _commit(handle, change)
    return m, evaluate(m, config, now)


def commit_cleaning(
    handle: LogHandle,
    snapshot: Manifest,
    out: CleanOutput,
    first_uncleanable: int,
    reason: Reason | None,
    evaluation: Evaluation,
) -> Manifest:
    """Commit a cleaning's output on top of the newest manifest, refusing if its range changed meanwhile."""
    k = len(out.replaced)

    def change(manifest: Manifest) -> Manifest:
        if tuple(s.id for s in manifest.segments[:k]) != out.replaced:
            raise ConflictError(
                f"log {handle.name!r} changed under the cleaning (retention or a log-start "
                "move); nothing was changed, run the cleaning again"
            )
        concurrent = tuple(h for h in manifest.holds if h.until >= snapshot.log_end_offset and h not in out.holds)
        summary = LastCleaning(
            now=evaluation.now,
            reason=reason,
            first_dirty_offset=evaluation.first_dirty_offset,
            first_uncleanable_offset=first_uncleanable,
            dirty_ratio=evaluation.dirty_ratio,
            files_rewritten=out.files_rewritten,
            finished_ms=wall_ms(),
            # the cleaning kept one record per key below u: the latest state scans that section
            unique_keys_below=first_uncleanable,
            figures=out.stats.as_dict(),
        )
        changes: dict[str, Any] = dict(
            segments=out.segments + manifest.segments[k:],
            checkpoint=first_uncleanable,
            uncleanable=None,
            engine_faults=None,  # the log cleaned: whatever stopped it before was not its data
            last_cleaning=summary,
            deleted=out.deleted,
            removals=manifest.removals + (1 if out.stats.tombstones_removed else 0),
        )
        if evaluation.compact:
            changes.update(holds=out.holds + concurrent, remembered=out.remembered, tombstone_index=out.tombstone_index)
        return manifest.with_(**changes)

    return _commit(handle, change)


def retention_cut(segments: Sequence[Segment], config: TopicConfig, now: int) -> int:
    """How many of the oldest segments retention deletes (SPEC §6); never the active (last) one."""
    total = sum(s.size for s in segments)
    cut = 0
    for s in segments[:-1]:
        # a segment with records always has a max timestamp; one without would not be timed out
        old = s.max_ts is not None and s.max_ts < now - config.retention_ms
        by_time = config.retention_ms >= 0 and (s.records == 0 or old)
        by_size = config.retention_bytes >= 0 and total - s.size >= config.retention_bytes
        if not (by_time or by_size):
            break
        total -= s.size
        cut += 1
    return cut


def apply_retention(handle: LogHandle, config: TopicConfig, now: int) -> Retention | None:
    """SPEC §6 retention, oldest segment first, never the active one; metadata only (files are GC'd)."""
    if not config.delete:
        return None
    removed: list[Retention] = []  # the last attempt's (a commit that lost a race is tried again)

    def change(manifest: Manifest) -> Manifest | None:
        cut = retention_cut(manifest.segments, config, now)
        if not cut:
            return None
        gone, segs = manifest.segments[:cut], manifest.segments[cut:]
        start = max(manifest.log_start_offset, segs[0].base_offset)
        removed[:] = [Retention(len(gone), sum(s.records for s in gone), sum(s.size for s in gone), start)]
        return manifest.with_(
            segments=tuple(segs),
            log_start_offset=start,
            holds=tuple(h for h in manifest.holds if h.offset >= start),
            removals=manifest.removals + 1,
        )

    _commit(handle, change)
    return removed[0] if removed else None


class Mark(Enum):
    """What marking a log uncleanable did. The run that marks a fault is the one that reports it: a run
    that finds the log marked already (another found the fault first) reports nothing new."""

    MARKED = "marked"  # this call marked the log
    ALREADY = "already marked"  # the log was marked already; its first mark is kept
    NOT_WRITTEN = "not written"  # the mark could not be written (the log may be unreadable)


def mark_uncleanable(handle: LogHandle, exc: BaseException) -> Mark:
    """Record on the log that a cleaning failed (one line, with time) unless it is marked already; planners
    then skip the log. What the call did (the caller's message and its alert depend on it)."""
    err = one_line(exc)
    marked_before: list[bool] = []

    def change(m: Manifest) -> Manifest | None:
        marked_before[:] = [m.uncleanable is not None]
        return None if marked_before[0] else m.with_(uncleanable=Uncleanable(err, wall_ms()), engine_faults=None)

    try:
        _commit(handle, change)
    except Exception:  # the log may be unreadable; the error is raised to the caller anyway
        return Mark.NOT_WRITTEN
    return Mark.ALREADY if marked_before[0] else Mark.MARKED


def clear_uncleanable(handle: LogHandle) -> Manifest:
    """Clear the uncleanable mark and the engine faults counted (an operator action after a repair)."""
    return _commit(
        handle, lambda m: m.with_(uncleanable=None, engine_faults=None) if m.uncleanable or m.engine_faults else None
    )


def record_engine_fault(handle: LogHandle, exc: BaseException, others_cleaned: bool) -> EngineFaults | None:
    """Count on the log a fault that looks like the engine's while the engine answered afterwards: a strike
    more when `others_cleaned` (another log cleaned since the last one); the count, or None when it could
    not be written (the store may be what failed: the run is retried anyway)."""
    err, now = one_line(exc), wall_ms()

    def change(m: Manifest) -> Manifest:
        before = m.engine_faults
        if before is None:
            return m.with_(engine_faults=EngineFaults(1, 1, err, now))
        return m.with_(engine_faults=EngineFaults(before.strikes + others_cleaned, before.faults + 1, err, now))

    try:
        return _commit(handle, change).engine_faults
    except Exception:
        return None


def one_line(exc: BaseException) -> str:
    """A failure in one line, as the uncleanable mark and the refusals name it: its type, its first line and,
    when the error came from a Python worker, the worker's own last error line."""
    first = first_line(exc, None, blank="").strip()
    # Errors raised in Python workers: the useful part is the worker's own last error line.
    lines = (line.strip() for line in reversed(str(exc).splitlines()))
    cause = next((line for line in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", line)), None)
    if cause and cause != first:
        first = f"{first} {cause}"
    return f"{type(exc).__name__}: {first}"[:500]
