"""A batch's table commits, one snapshot per topic: the logs of a batch add their latest states as their
cleanings finish, and the batch commits each topic once, after its cleanings.

A batch run cleans many logs in one process, several at once. Committed as each log finishes, a topic's logs
made a snapshot per group of logs that happened to finish together, each paying the commit's fixed cost (the
table's metadata read and written, manifests, the catalog's lock, the scan planning) and, for a new table, a
batch's first round backfilled it group by group (bench/table_fleet.py). Here the states wait in memory, and
`commit` writes each topic's logs in one snapshot whose summary records every log's version (exactly once
per log, table/commit/commit.py): a log whose version the table already reflects commits nothing, and a batch
killed between its cleanings and its commits leaves the table behind, which the next run's comparison with
the latest state repairs.

Memory bounds the wait: when the pending states exceed `max_bytes`, the topic holding the most is
committed at once, as a group of its own (a per-group commit, as before), and its states are dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import pyarrow as pa

from compaction_assets.errors import CompactionError
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.commit import CommitResult, LogCommit, commit_logs, state_at
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class TopicOutcome:
    """One log's share of its topic's commit: its result, or the one-line error of the topic's commit."""

    log: str
    result: CommitResult | None = None
    error: CompactionError | None = None


class TopicBatch:
    """One batch's table commits: logs added from many threads as they finish, each topic committed once
    by `commit` (earlier, as a group, when the pending states outgrow `max_bytes`)."""

    def __init__(self, max_bytes: int, now: int | None = None) -> None:
        self.max_bytes, self.now = max_bytes, now
        self._guard = threading.Lock()
        self._pending: dict[str, list[LogCommit]] = {}
        self._bytes: dict[str, int] = {}
        self._logs: dict[str, list[LogCommit]] = {}  # every log added, per topic (for the upkeep)
        self._early: dict[str, TopicOutcome] = {}  # logs committed by a group before `commit`

    def add(
        self, handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None, state: pa.Table | None = None
    ) -> None:
        """Queue the log's latest state at `manifest` (built here, in the caller's thread, when not built
        already) for its topic's commit; none past the in-process bound (Spark tasks find its change when the
        topic commits: table/commit/route.py)."""
        manifest = manifest or handle.manifest()
        state = state_at(handle, config, manifest, state)
        item = LogCommit(handle, config, manifest, state)
        topic = parse_log_name(handle.name)[0]
        with self._guard:
            self._pending.setdefault(topic, []).append(item)
            self._logs.setdefault(topic, []).append(replace(item, state=None))
            self._bytes[topic] = self._bytes.get(topic, 0) + (state.nbytes if state is not None else 0)
            over = sum(self._bytes.values()) > self.max_bytes
            heaviest = max(self._bytes, key=lambda name: self._bytes[name]) if over else None
            group = self._take(heaviest) if heaviest else []
        if group:
            committed = self._committed(group, maintain=False)
            with self._guard:
                self._early.update(committed)

    def _take(self, topic: str) -> list[LogCommit]:
        """The topic's pending logs, no longer pending (under the guard)."""
        self._bytes.pop(topic, None)
        return self._pending.pop(topic, [])

    def _committed(self, group: list[LogCommit], maintain: bool) -> dict[str, TopicOutcome]:
        """Commit one topic's group in one snapshot; each log's outcome (the commit's error for each, on one)."""
        try:
            results = commit_logs(group, now=self.now, maintain=maintain)
        except CompactionError as exc:
            return {item.handle.name: TopicOutcome(item.handle.name, error=exc) for item in group}
        return {r.log: TopicOutcome(r.log, r) for r in results}

    def commit(self) -> dict[str, TopicOutcome]:
        """Commit each topic's pending logs in one snapshot, then rewrite its due buckets and expire its old
        snapshots once; every added log's outcome, by name."""
        with self._guard:
            topics = {topic: self._take(topic) for topic in list(self._pending)}
            topics.update({topic: [] for topic in self._logs if topic not in topics})
            early = dict(self._early)
        out: dict[str, TopicOutcome] = {}
        for topic, group in topics.items():
            # the logs a group committed early ride along without a state: they commit nothing (a failed group's
            # are tried again), and the topic's upkeep covers their buckets
            ridden = [item for item in self._logs[topic] if item.handle.name in early]
            for name, final in self._committed(group + ridden, maintain=True).items():
                out[name] = _merged(early.get(name), final)
        return out


def _merged(early: TopicOutcome | None, final: TopicOutcome) -> TopicOutcome:
    """A log's outcome from its early group's commit (if any) and its topic's final one: the early commit's
    result with the final upkeep's, unless the early one failed; an upkeep that failed loses nothing."""
    if early is None or early.result is None:
        return final
    if final.result is None:
        return early
    upkeep = final.result
    return replace(
        early,
        result=replace(early.result, expiry=upkeep.expiry, rewrite=upkeep.rewrite, files_removed=upkeep.files_removed),
    )
