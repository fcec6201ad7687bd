"""Figures across logs (SPEC §8, Kafka's metric names), from manifests only (no Spark).

- `uncleanable-partitions-count`: logs marked uncleanable (a cleaning failed and nobody cleared it),
  plus logs whose metadata cannot be read at all (they cannot be cleaned either);
- `uncleanable-bytes`: the sum over the marked logs of their cleanable bytes today (from the
  checkpoint to the first uncleanable offset), i.e. the dirty bytes stuck behind the failure, as in
  Kafka's LogCleanerManager;
- `max-dirty-percent`: 100 x the highest dirty ratio among compacted logs that are not uncleanable and
  not empty; `max-compaction-delay-secs`: the largest max-compaction delay / 1000;
- `max-clean-time-secs`: the longest duration among the logs' last cleanings;
- `time-since-last-run-ms`: milliseconds from the end of the most recent cleaning of any of the logs
  to `now` (-1 when none of them was ever cleaned), as Kafka's cleaner reports the time since its last run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

from compaction_assets.cleaning.planner import Evaluation, evaluate
from compaction_assets.errors import CompactionError
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest

# SPEC §8's figures across logs, by Kafka's metric names.
MAX_DIRTY_PERCENT = "max-dirty-percent"
MAX_COMPACTION_DELAY_SECS = "max-compaction-delay-secs"
MAX_CLEAN_TIME_SECS = "max-clean-time-secs"
UNCLEANABLE_PARTITIONS_COUNT = "uncleanable-partitions-count"
UNCLEANABLE_BYTES = "uncleanable-bytes"
UNCLEANABLE_LOGS = "uncleanable-logs"
TIME_SINCE_LAST_RUN_MS = "time-since-last-run-ms"


@dataclass(frozen=True)
class LogState:
    log: str
    manifest: Manifest | None
    evaluation: Evaluation | None
    error: str | None = None          # why the log could not be evaluated


def evaluate_logs(store, config_for: Callable[[str], TopicConfig], now: int,
                  names: Iterable[str] | None = None) -> list[LogState]:
    """Evaluate each log; a log that cannot be read or configured is kept with its error."""
    out = []
    for name in sorted(store.logs() if names is None else names):
        try:
            m = store.log(name).manifest()
            out.append(LogState(name, m, evaluate(m, config_for(name), now)))
        except CompactionError as exc:
            out.append(LogState(name, None, None, str(exc)))
    return out


def uncleanable_logs(states: list[LogState]) -> list[dict]:
    """One row per log that cannot be cleaned: marked uncleanable, or whose metadata cannot be read."""
    rows = []
    for s in states:
        if s.evaluation is None:
            rows.append({"log": s.log, "error": s.error, "since_ms": None, "uncleanable_bytes": 0})
        elif s.manifest.uncleanable:
            rows.append({"log": s.log, "error": s.manifest.uncleanable.get("error"),
                         "since_ms": s.manifest.uncleanable.get("since_ms"),
                         "uncleanable_bytes": s.evaluation.cleanable_bytes})
    return rows


def figures(states: list[LogState], now: int | None = None) -> dict:
    """SPEC §8's figures across the given logs, keyed by the metric names above, at `now` (by default
    the time the logs were evaluated at)."""
    evs = [s.evaluation for s in states if s.evaluation is not None]
    candidates = [e for e in evs if e.compact and not e.uncleanable and e.clean_bytes + e.cleanable_bytes > 0]
    stuck = uncleanable_logs(states)
    clean_times = [float((s.manifest.last_cleaning or {}).get("clean_time_secs") or 0.0)
                   for s in states if s.manifest is not None]
    if now is None:
        now = max((e.now for e in evs), default=0)
    finished = [int(s.manifest.last_cleaning["finished_ms"]) for s in states
                if s.manifest is not None and (s.manifest.last_cleaning or {}).get("finished_ms") is not None]
    return {
        "logs": len(states),
        MAX_DIRTY_PERCENT: round(100 * max((e.dirty_ratio for e in candidates), default=0.0), 6),
        MAX_COMPACTION_DELAY_SECS: max((e.max_compaction_delay_ms for e in evs), default=0) / 1000,
        MAX_CLEAN_TIME_SECS: max(clean_times, default=0.0),
        UNCLEANABLE_PARTITIONS_COUNT: len(stuck),
        UNCLEANABLE_BYTES: sum(r["uncleanable_bytes"] for r in stuck),
        UNCLEANABLE_LOGS: stuck,
        TIME_SINCE_LAST_RUN_MS: max(now - max(finished), 0) if finished else -1,
    }
