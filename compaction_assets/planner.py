"""What to clean and when (SPEC §3-§5), from the manifest alone: no record is read here.

`evaluate` is a pure function of (manifest, config, now); sensors call it for every log on every tick.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .config import INT64_MAX, TopicConfig
from .manifest import Manifest, Segment, new_id


@dataclass(frozen=True)
class Evaluation:
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
    reason: str | None            # dirty_ratio | max_compaction_lag | delete_horizon | None
    deadline_roll: bool           # the active segment is due to be sealed at `now`
    checkpoint_reset: bool        # the stored checkpoint is outside [log_start, LEO]
    stored_checkpoint: int
    expired_tombstones: int       # clean-section tombstones whose horizon has passed and are not held
    uncleanable: bool
    log_start_offset: int
    log_end_offset: int
    version: int = 0              # the manifest version evaluated (the log's state)

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def priority(self) -> tuple:
        """Sort key: highest dirty ratio first, then largest delay, then log name (SPEC §5)."""
        return (-self.dirty_ratio, -self.max_compaction_delay_ms, self.log)

    def reason_for(self, force: bool) -> str | None:
        if not self.compact:
            return None
        if self.eligible:
            return self.reason
        return "forced" if force else None


def deadline_roll_due(m: Manifest, config: TopicConfig, now: int) -> bool:
    """A non-empty active segment whose earliest record is older than now - roll interval (SPEC §1)."""
    active = m.active
    return not active.empty and active.min_ts is not None and now - active.min_ts > config.roll_interval_ms


def seal_active(m: Manifest) -> Manifest:
    if m.active.empty:
        return m
    sealed = Segment(**{**m.active.__dict__, "next_offset": m.log_end_offset})
    return m.with_(segments=m.segments[:-1] + (sealed, Segment(new_id(), m.log_end_offset, m.log_end_offset)))


def first_dirty(m: Manifest) -> int:
    c = m.checkpoint
    return c if m.log_start_offset <= c <= m.log_end_offset else m.log_start_offset


def first_uncleanable(m: Manifest, config: TopicConfig, now: int, fd: int) -> int:
    u = m.active.base_offset
    if config.min_compaction_lag_ms > 0:
        for seg in m.segments[m.segment_index(fd):-1]:
            if seg.records and seg.max_ts is not None and seg.max_ts > now - config.min_compaction_lag_ms:
                u = min(u, seg.base_offset)
                break
    return fd if u < fd else u


def rewritten_segments(m: Manifest, u: int) -> list[Segment]:
    """The segments a cleaning bounded by `u` rewrites: every sealed segment lying wholly below it."""
    return [s for s in m.segments[:-1] if s.next_offset <= u]


def evaluate(m: Manifest, config: TopicConfig, now: int) -> Evaluation:
    roll = deadline_roll_due(m, config, now)
    if roll:
        m = seal_active(m)
    fd = first_dirty(m)
    u = first_uncleanable(m, config, now, fd)
    idx = m.segment_index(fd)
    clean_bytes = sum(s.size for s in m.segments if s.base_offset < fd)
    cleanable = sum(s.size for s in m.segments[idx:-1] if s.base_offset < u) if u > fd else 0
    total = clean_bytes + cleanable
    ratio = cleanable / total if total > 0 else 0.0

    earliest = [s.min_pos_ts for s in m.segments[idx:-1] if s.min_pos_ts is not None]
    delay = 0
    if earliest:
        due = (now - config.max_compaction_lag_ms) - min(earliest)  # exact: Python ints do not overflow
        delay = min(max(due, 0), INT64_MAX)

    expired = expired_tombstones(m, now, fd, u)
    reason = None
    if config.compact and total > 0:
        if ratio > config.min_cleanable_dirty_ratio:
            reason = "dirty_ratio"
        elif delay > 0 and cleanable > 0:
            reason = "max_compaction_lag"
        elif expired > 0:
            reason = "delete_horizon"
    return Evaluation(
        log=m.log, now=now, compact=config.compact, first_dirty_offset=fd, first_uncleanable_offset=u,
        clean_bytes=clean_bytes, cleanable_bytes=cleanable, dirty_ratio=ratio,
        max_compaction_delay_ms=delay, eligible=reason is not None, reason=reason, deadline_roll=roll,
        checkpoint_reset=fd != m.checkpoint, stored_checkpoint=m.checkpoint, expired_tombstones=expired,
        uncleanable=m.uncleanable is not None, log_start_offset=m.log_start_offset,
        log_end_offset=m.log_end_offset, version=m.version)


def expired_tombstones(m: Manifest, now: int, fd: int, u: int) -> int:
    """Tombstones of the clean section [log_start, first_dirty) whose horizon is <= now, less those a
    record at or above `u` still holds (SPEC §5, §6). A segment straddling first_dirty contributes its
    horizon groups wholly below it, and at least one tombstone of a group that starts below it."""
    due = 0
    for s in m.segments:
        if s.base_offset >= fd:
            break
        for h, c, lo, hi in s.horizons:
            if h <= now and lo < fd:
                due += c if hi < fd else 1
    if not due:
        return 0
    held: dict[int, int] = {}
    for h in m.holds:  # one tombstone may be held by several appends: count it once
        if h.horizon <= now and m.log_start_offset <= h.offset < fd:
            held[h.offset] = max(held.get(h.offset, -1), h.until)
    return max(due - sum(1 for until in held.values() if until >= u), 0)


def order(evaluations: list[Evaluation]) -> list[Evaluation]:
    return sorted(evaluations, key=lambda e: e.priority)
