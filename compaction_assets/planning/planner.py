"""What to clean and when (SPEC §3-§5), from the manifest alone: no record is read here.

`evaluate` is a pure function of (manifest, config, now); sensors call it for every log on every tick.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.manifest import Manifest, Segment, new_id
from compaction_assets.topics.config import TopicConfig
from compaction_assets.topics.str_enum import StrEnum


class Reason(StrEnum):
    """Why a log is cleaned (SPEC §5); compares equal to its name, as JSON, tags and manifests carry it."""

    DIRTY_RATIO = "dirty_ratio"  # the dirty ratio is above min.cleanable.dirty.ratio
    MAX_COMPACTION_LAG = "max_compaction_lag"  # a dirty record is older than max.compaction.lag.ms
    DELETE_HORIZON = "delete_horizon"  # clean-section tombstones are past their delete horizon
    FORCED = "forced"  # an operator asked (`--force`, or the asset's config)


@dataclass(frozen=True)
class Evaluation:
    """One log at `now` from its manifest alone (SPEC §3-§5): its ranges, dirty ratio, delay and eligibility."""

    log: str
    now: int
    compact: bool
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    dirty_ratio: float
    max_compaction_delay_ms: int
    eligible: bool
    reason: Reason | None  # why it is eligible (never FORCED here), or None
    deadline_roll: bool  # the active segment is due to be sealed at `now`
    checkpoint_reset: bool  # the stored checkpoint is outside [log_start, LEO]
    remembered_expired: bool  # some remembered deletes expire at `now` (their table is rewritten)
    stored_checkpoint: int
    expired_tombstones: int  # clean-section tombstones whose horizon has passed and are not held
    uncleanable: bool
    log_start_offset: int
    log_end_offset: int
    version: int = 0  # the manifest version evaluated (the log's state)
    why_not_eligible: str | None = None  # why a log is not due (or is marked uncleanable), in words

    def as_dict(self) -> dict:
        """The evaluation as JSON-ready data."""
        return asdict(self)

    @property
    def priority(self) -> tuple:
        """Sort key: highest dirty ratio first, then largest delay, then log name (SPEC §5)."""
        return (-self.dirty_ratio, -self.max_compaction_delay_ms, self.log)

    def reason_for(self, force: bool) -> Reason | None:
        """Why a run cleans the log (FORCED when forced and not eligible), or None when it does not."""
        if not self.compact:
            return None
        if self.eligible:
            return self.reason
        return Reason.FORCED if force else None


def deadline_roll_due(manifest: Manifest, config: TopicConfig, now: int) -> bool:
    """A non-empty active segment whose earliest record is older than now - roll interval (SPEC §1)."""
    active = manifest.active
    return not active.empty and active.min_ts is not None and now - active.min_ts > config.roll_interval_ms


def seal_active(manifest: Manifest) -> Manifest:
    """The manifest with its active segment sealed and a new empty one after it."""
    if manifest.active.empty:
        return manifest
    sealed = Segment(**{**manifest.active.__dict__, "next_offset": manifest.log_end_offset})
    return manifest.with_(
        segments=manifest.segments[:-1] + (sealed, Segment(new_id(), manifest.log_end_offset, manifest.log_end_offset))
    )


def first_dirty(manifest: Manifest) -> int:
    """The first dirty offset: the checkpoint, reset to the log start when it lies outside the log (SPEC §3)."""
    c = manifest.checkpoint
    return c if manifest.log_start_offset <= c <= manifest.log_end_offset else manifest.log_start_offset


def first_uncleanable(manifest: Manifest, config: TopicConfig, now: int, first_dirty_offset: int) -> int:
    """The first offset a cleaning may not touch: the active segment and what compaction lag protects (SPEC §3)."""
    u = manifest.active.base_offset
    if config.min_compaction_lag_ms > 0:
        for seg in manifest.segments[manifest.segment_index(first_dirty_offset) : -1]:
            if seg.records and seg.max_ts is not None and seg.max_ts > now - config.min_compaction_lag_ms:
                u = min(u, seg.base_offset)
                break
    return first_dirty_offset if u < first_dirty_offset else u


def rewritten_segments(manifest: Manifest, first_uncleanable: int) -> list[Segment]:
    """The segments a cleaning bounded by `u` rewrites: every sealed segment lying wholly below it."""
    return [s for s in manifest.segments[:-1] if s.next_offset <= first_uncleanable]


@dataclass(frozen=True)
class CleaningRange:
    """The segments a cleaning bounded by `first_uncleanable` rewrites, split where the last cleaning left one
    record per key; worked out once, before the cleaning, and handed to its phases."""

    first_uncleanable: int
    segments: list[tuple[int, Segment]]  # (index, segment): a prefix of the manifest's segments
    unique: list[tuple[int, Segment]]  # those wholly below that offset (one record per key)
    newer: list[tuple[int, Segment]]  # the others
    rows: int  # rows the segments' files hold
    newer_rows: int  # ... of the newer segments


def cleaning_range(manifest: Manifest, first_uncleanable: int) -> CleaningRange:
    """The range a cleaning bounded by `first_uncleanable` rewrites, split at the deduplicated prefix."""
    segments = list(enumerate(rewritten_segments(manifest, first_uncleanable)))
    below = unique_keys_below(manifest)
    unique = [(i, s) for i, s in segments if below is not None and s.next_offset <= below]
    newer = segments[len(unique) :]
    return CleaningRange(
        first_uncleanable,
        segments,
        unique,
        newer,
        sum(s.physical_rows for _, s in segments),
        sum(s.physical_rows for _, s in newer),
    )


def evaluate(manifest: Manifest, config: TopicConfig, now: int) -> Evaluation:
    """SPEC §3-§5 for one log from its manifest alone: ranges, dirty ratio, delay, eligibility and reason."""
    roll = deadline_roll_due(manifest, config, now)
    if roll:
        manifest = seal_active(manifest)
    fd = first_dirty(manifest)
    u = first_uncleanable(manifest, config, now, fd)
    idx = manifest.segment_index(fd)
    clean_bytes = sum(s.size for s in manifest.segments if s.base_offset < fd)
    cleanable = sum(s.size for s in manifest.segments[idx:-1] if s.base_offset < u) if u > fd else 0
    total = clean_bytes + cleanable
    ratio = cleanable / total if total > 0 else 0.0

    earliest = [s.min_pos_ts for s in manifest.segments[idx:-1] if s.min_pos_ts is not None]
    delay = 0
    if earliest:
        due = (now - config.max_compaction_lag_ms) - min(earliest)  # exact: Python ints do not overflow
        delay = min(max(due, 0), INT64_MAX)

    expired = expired_tombstones(manifest, now, fd, u)
    reason = None
    if config.compact and total > 0:
        if ratio > config.min_cleanable_dirty_ratio:
            reason = Reason.DIRTY_RATIO
        elif delay > 0 and cleanable > 0:
            reason = Reason.MAX_COMPACTION_LAG
        elif expired > 0:
            reason = Reason.DELETE_HORIZON
    why = why_not(manifest, config, now, fd, u, ratio, cleanable, total, reason)
    return Evaluation(
        log=manifest.log,
        now=now,
        why_not_eligible=why,
        compact=config.compact,
        first_dirty_offset=fd,
        first_uncleanable_offset=u,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable,
        dirty_ratio=ratio,
        max_compaction_delay_ms=delay,
        eligible=reason is not None,
        reason=reason,
        deadline_roll=roll,
        checkpoint_reset=fd != manifest.checkpoint,
        stored_checkpoint=manifest.checkpoint,
        expired_tombstones=expired,
        remembered_expired=bool(manifest.remembered and manifest.remembered["min_expiry"] <= now),
        uncleanable=manifest.uncleanable is not None,
        log_start_offset=manifest.log_start_offset,
        log_end_offset=manifest.log_end_offset,
        version=manifest.version,
    )


def duration(ms: int) -> str:
    """`ms` in the largest whole unit that fits (1 day, 7 days, 90 minutes, 1500 ms)."""
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000)):
        if ms >= size and ms % size == 0:
            n = ms // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{ms} ms"


def why_not(
    manifest: Manifest,
    config: TopicConfig,
    now: int,
    fd: int,
    u: int,
    ratio: float,
    cleanable: int,
    total: int,
    reason: Reason | None,
) -> str | None:
    """Why the log is not due for a cleaning (None when it is): which rule of SPEC §3-§5 holds it back,
    with its figures; a log marked uncleanable says so first (no sensor or `clean --all` takes it)."""
    if manifest.uncleanable is not None:
        return f"marked uncleanable ({manifest.uncleanable.error}); `clear-uncleanable {manifest.log}` once repaired"
    if reason is not None:
        return None
    if not config.compact:
        return f"cleanup.policy {','.join(sorted(config.policy))}: no compaction, only retention"
    if manifest.log_end_offset == manifest.log_start_offset or (total == 0 and manifest.active.empty):
        return "the log has no records"
    if u == manifest.active.base_offset and fd >= u and manifest.active.empty:  # rolling it would seal nothing
        return (
            f"every record is cleaned (offsets below {fd}) and the active segment is empty: nothing to clean "
            "until new records arrive"
        )
    if u == manifest.active.base_offset and fd >= u:
        where = (
            "all records are in the active segment"
            if fd <= manifest.log_start_offset
            else f"the records below offset {fd} are cleaned and the newer ones are in the active segment"
        )
        return (
            f"{where}: `roll` it or wait for segment.ms ({duration(config.segment_ms)}) or segment.bytes "
            f"({config.segment_bytes} bytes) to seal it"
        )
    if cleanable == 0 and u < manifest.active.base_offset:
        seg = manifest.segments[manifest.segment_index(u)]
        return (
            f"the records from offset {u} are within min.compaction.lag.ms "
            f"({duration(config.min_compaction_lag_ms)}) until {(seg.max_ts or 0) + config.min_compaction_lag_ms} "
            "(ms since the epoch)"
        )
    lag = (
        ""
        if config.max_compaction_lag_ms >= INT64_MAX
        else f", and no dirty record is older than max.compaction.lag.ms ({duration(config.max_compaction_lag_ms)})"
    )
    return (
        f"dirty ratio {ratio:.3f} ({cleanable} of {total} bytes dirty) is not above "
        f"min.cleanable.dirty.ratio {config.min_cleanable_dirty_ratio}{lag}"
    )


def expired_tombstones(manifest: Manifest, now: int, first_dirty_offset: int, first_uncleanable: int) -> int:
    """Tombstones of the clean section [log_start, first_dirty) whose horizon is <= now, less those a
    record at or above `u` still holds (SPEC §5, §6). A segment straddling first_dirty contributes its
    horizon groups wholly below it, and at least one tombstone of a group that starts below it."""
    due = 0
    for s in manifest.segments:
        if s.base_offset >= first_dirty_offset:
            break
        for h, c, lo, hi in s.horizons:
            if h <= now and lo < first_dirty_offset:
                due += c if hi < first_dirty_offset else 1
    if not due:
        return 0
    held: dict[int, int] = {}
    for hold in manifest.holds:  # one tombstone may be held by several appends: count it once
        if hold.horizon <= now and manifest.log_start_offset <= hold.offset < first_dirty_offset:
            held[hold.offset] = max(held.get(hold.offset, -1), hold.until)
    return max(due - sum(1 for until in held.values() if until >= first_uncleanable), 0)


def order(evaluations: list[Evaluation]) -> list[Evaluation]:
    """Evaluations in SPEC §5 priority order (the logs to clean first come first)."""
    return sorted(evaluations, key=lambda e: e.priority)


def unique_keys_below(manifest: Manifest) -> int | None:
    """The offset below which the last cleaning left one visible record per key, if the manifest says."""
    return manifest.last_cleaning.unique_keys_below if manifest.last_cleaning else None
