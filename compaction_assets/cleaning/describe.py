"""`describe`: a log's metadata together with today's evaluation of it."""

from __future__ import annotations

from compaction_assets.cleaning.planner import evaluate
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.store import LogHandle, wall_ms


def describe(handle: LogHandle, config: TopicConfig, now: int | None = None) -> dict:
    """The log as metadata: segments, ranges, sizes, checkpoint, state and today's evaluation."""
    m = handle.manifest()
    now = wall_ms() if now is None else now
    ev = evaluate(m, config, now)
    return {
        "log": handle.name, "version": m.version, "log_start_offset": m.log_start_offset,
        "log_end_offset": m.log_end_offset, "checkpoint": m.checkpoint,
        "records": m.total_records, "size_bytes": m.total_size,
        "segments": [{"base_offset": s.base_offset, "next_offset": s.next_offset, "active": i == len(m.segments) - 1,
                      "records": s.records, "size_bytes": s.size, "files": len(s.files), "min_ts": s.min_ts,
                      "max_ts": s.max_ts, "tombstones": s.tombstones,
                      "horizons": [list(h) for h in s.horizons]} for i, s in enumerate(m.segments)],
        "uncleanable": m.uncleanable, "last_cleaning": m.last_cleaning, "invalid_records": m.invalid_records,
        "remembered_deletes": (m.remembered or {}).get("count", 0), "held_tombstones": len(m.holds),
        "config": config.to_kafka(), "evaluation": ev.as_dict(),
    }
