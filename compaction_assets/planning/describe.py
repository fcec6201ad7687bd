"""`describe`: a log's metadata together with today's evaluation of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compaction_assets.planning.planner import Evaluation, evaluate
from compaction_assets.store.log_store import LogHandle, wall_ms
from compaction_assets.store.manifest import Horizon, LastCleaning, Segment, Uncleanable
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class SegmentDescription:
    """One segment as `describe` shows it: its offset range, sizes, timestamps and kept tombstones."""

    base_offset: int
    next_offset: int
    active: bool  # the last segment, the one appends go to
    records: int
    size_bytes: int
    files: int  # how many files the logical segment is made of
    min_ts: int | None
    max_ts: int | None
    tombstones: int
    horizons: tuple[Horizon, ...]  # its kept tombstones, grouped by delete horizon

    @classmethod
    def of(cls, segment: Segment, active: bool) -> SegmentDescription:
        """The description of `segment` (`active` when it is the log's last)."""
        return cls(
            segment.base_offset,
            segment.next_offset,
            active,
            segment.records,
            segment.size,
            len(segment.files),
            segment.min_ts,
            segment.max_ts,
            segment.tombstones,
            segment.horizons,
        )

    def as_document(self) -> dict[str, Any]:
        """The segment as JSON-ready data, a horizon as a list (as the manifest stores it)."""
        return {
            "base_offset": self.base_offset,
            "next_offset": self.next_offset,
            "active": self.active,
            "records": self.records,
            "size_bytes": self.size_bytes,
            "files": self.files,
            "min_ts": self.min_ts,
            "max_ts": self.max_ts,
            "tombstones": self.tombstones,
            "horizons": [list(h) for h in self.horizons],
        }


@dataclass(frozen=True)
class LogDescription:
    """A log as metadata (`compaction describe`): its offsets, sizes, segments, state and today's evaluation."""

    log: str
    version: int  # the manifest version described
    log_start_offset: int
    log_end_offset: int
    checkpoint: int
    records: int
    size_bytes: int
    segments: tuple[SegmentDescription, ...]
    uncleanable: Uncleanable | None  # the manifest's mark
    last_cleaning: LastCleaning | None  # the last cleaning's summary
    invalid_records: int
    remembered_deletes: int  # keys whose deletion is remembered past their tombstone
    held_tombstones: int  # tombstones kept because a record above them would come back
    config: dict[str, Any]  # the topic configuration used, by Kafka's names
    evaluation: Evaluation

    def as_document(self) -> dict[str, Any]:
        """The description as JSON-ready data, in the order `compaction describe` prints it."""
        return {
            "log": self.log,
            "version": self.version,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "checkpoint": self.checkpoint,
            "records": self.records,
            "size_bytes": self.size_bytes,
            "segments": [s.as_document() for s in self.segments],
            "uncleanable": None if self.uncleanable is None else self.uncleanable.to_json(),
            "last_cleaning": None if self.last_cleaning is None else self.last_cleaning.to_json(),
            "invalid_records": self.invalid_records,
            "remembered_deletes": self.remembered_deletes,
            "held_tombstones": self.held_tombstones,
            "config": self.config,
            "evaluation": self.evaluation.as_dict(),
        }


def describe(handle: LogHandle, config: TopicConfig, now: int | None = None) -> LogDescription:
    """The log as metadata: segments, ranges, sizes, checkpoint, state and today's evaluation."""
    m = handle.manifest()
    now = wall_ms() if now is None else now
    last = len(m.segments) - 1
    return LogDescription(
        log=handle.name,
        version=m.version,
        log_start_offset=m.log_start_offset,
        log_end_offset=m.log_end_offset,
        checkpoint=m.checkpoint,
        records=m.total_records,
        size_bytes=m.total_size,
        segments=tuple(SegmentDescription.of(s, i == last) for i, s in enumerate(m.segments)),
        uncleanable=m.uncleanable,
        last_cleaning=m.last_cleaning,
        invalid_records=m.invalid_records,
        remembered_deletes=(m.remembered or {}).get("count", 0),
        held_tombstones=len(m.holds),
        config=config.to_kafka(),
        evaluation=evaluate(m, config, now),
    )
