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

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from compaction_assets.cleaning.decide.decision import CleaningStats
from compaction_assets.errors import CompactionError
from compaction_assets.planning.planner import Evaluation, evaluate
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

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
    error: str | None = None  # why the log could not be evaluated


def evaluate_logs(
    store, config_for: Callable[[str], TopicConfig], now: int, names: Iterable[str] | None = None
) -> list[LogState]:
    """Evaluate each log (every log of the store when `names` is None); a log that cannot be read or
    configured is kept with its error."""
    if names is None:
        return evaluate_read(store.current_logs(), config_for, now)
    ordered = sorted(names)
    return evaluate_read(dict(zip(ordered, store.read_manifests(ordered))), config_for, now)


def evaluate_read(
    read: Mapping[str, Manifest | CompactionError], config_for: Callable[[str], TopicConfig], now: int
) -> list[LogState]:
    """Evaluate logs whose manifests were read (`LogStore.current_logs`, `read_manifests`), by name; a log
    whose manifest could not be read, or that cannot be configured, is kept with its error."""
    out = []
    for name in sorted(read):
        manifest = read[name]
        try:
            if isinstance(manifest, CompactionError):
                raise manifest
            out.append(LogState(name, manifest, evaluate(manifest, config_for(name), now)))
        except CompactionError as exc:
            out.append(LogState(name, None, None, str(exc)))
    return out


@dataclass(frozen=True)
class UncleanableLog:
    """A log that cannot be cleaned: marked uncleanable, or whose metadata cannot be read."""

    log: str
    error: str | None
    since_ms: int | None  # when it was marked (None: its metadata cannot be read)
    uncleanable_bytes: int  # its cleanable bytes today, stuck behind the failure


@dataclass(frozen=True)
class FleetFigures:
    """SPEC §8's figures across logs; `as_dict` keys them by Kafka's metric names (the CLI's JSON)."""

    logs: int
    max_dirty_percent: float
    max_compaction_delay_secs: float
    max_clean_time_secs: float
    uncleanable_partitions_count: int
    uncleanable_bytes: int
    uncleanable_logs: list[UncleanableLog]
    time_since_last_run_ms: int  # -1: none of the logs was ever cleaned

    def as_dict(self) -> dict:
        """The figures by metric name, the uncleanable logs as rows."""
        return {
            "logs": self.logs,
            MAX_DIRTY_PERCENT: self.max_dirty_percent,
            MAX_COMPACTION_DELAY_SECS: self.max_compaction_delay_secs,
            MAX_CLEAN_TIME_SECS: self.max_clean_time_secs,
            UNCLEANABLE_PARTITIONS_COUNT: self.uncleanable_partitions_count,
            UNCLEANABLE_BYTES: self.uncleanable_bytes,
            UNCLEANABLE_LOGS: [asdict(row) for row in self.uncleanable_logs],
            TIME_SINCE_LAST_RUN_MS: self.time_since_last_run_ms,
        }


def uncleanable_logs(states: list[LogState]) -> list[UncleanableLog]:
    """One row per log that cannot be cleaned: marked uncleanable, or whose metadata cannot be read."""
    rows = []
    for s in states:
        if s.evaluation is None or s.manifest is None:  # evaluated only once its manifest was read
            rows.append(UncleanableLog(s.log, s.error, None, 0))
        elif s.manifest.uncleanable:
            rows.append(
                UncleanableLog(
                    s.log, s.manifest.uncleanable.error, s.manifest.uncleanable.since_ms, s.evaluation.cleanable_bytes
                )
            )
    return rows


def figures(states: list[LogState], now: int | None = None) -> FleetFigures:
    """SPEC §8's figures across the given logs at `now` (by default the time the logs were evaluated at)."""
    evs = [s.evaluation for s in states if s.evaluation is not None]
    candidates = [e for e in evs if e.compact and not e.uncleanable and e.clean_bytes + e.cleanable_bytes > 0]
    stuck = uncleanable_logs(states)
    clean_times = [
        float(CleaningStats.of(s.manifest.last_cleaning.figures).clean_time_secs) if s.manifest.last_cleaning else 0.0
        for s in states
        if s.manifest is not None
    ]
    if now is None:
        now = max((e.now for e in evs), default=0)
    finished = [
        s.manifest.last_cleaning.finished_ms
        for s in states
        if s.manifest is not None and s.manifest.last_cleaning and s.manifest.last_cleaning.finished_ms is not None
    ]
    return FleetFigures(
        logs=len(states),
        max_dirty_percent=round(100 * max((e.dirty_ratio for e in candidates), default=0.0), 6),
        max_compaction_delay_secs=max((e.max_compaction_delay_ms for e in evs), default=0) / 1000,
        max_clean_time_secs=max(clean_times, default=0.0),
        uncleanable_partitions_count=len(stuck),
        uncleanable_bytes=sum(r.uncleanable_bytes for r in stuck),
        uncleanable_logs=stuck,
        time_since_last_run_ms=max(now - max(finished), 0) if finished else -1,
    )
