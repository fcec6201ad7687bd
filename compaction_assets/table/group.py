"""A process's table commits grouped per topic: the logs of a topic whose commits arrive while the topic's
previous commit runs are committed together, in one snapshot (a group commit).

A batch run cleans many logs in one process, several at once, and each finished log commits its topic's
table. Committed one by one, a batch of ten logs of a topic makes ten snapshots, each paying the commit's
fixed cost (the table's metadata read and written, manifests, the catalog's lock), and concurrent ones
lose their races and redo each other. Here the first log of a topic to arrive commits (the leader); the
logs that arrive meanwhile wait and are committed by the leader in the next snapshot, all at once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from compaction_assets.errors import CompactionError
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.names import parse_log_name
from compaction_assets.log.store import LogHandle
from compaction_assets.table.commit import CommitResult, LogCommit, commit_logs


@dataclass
class _Waiting:
    """One log's commit waiting for its group's snapshot."""
    item: LogCommit
    now: int | None
    done: threading.Event = field(default_factory=threading.Event)
    result: CommitResult | None = None
    error: BaseException | None = None


class TopicCommits:
    """Commits of one process's logs to their topics' tables, one snapshot per topic for the logs that
    arrive together; safe to call from many threads."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._queued: dict[str, list[_Waiting]] = {}
        self._leading: set[str] = set()

    def commit(self, handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None,
               now: int | None = None, state=None) -> CommitResult:
        """Commit the log's latest state (`state`, when built already for `manifest`) to its topic's table,
        with the logs of the topic queued meanwhile."""
        topic = parse_log_name(handle.name)[0]
        mine = _Waiting(LogCommit(handle, config, manifest, state), now)
        with self._guard:
            self._queued.setdefault(topic, []).append(mine)
            leader = topic not in self._leading
            self._leading.add(topic)
        if leader:
            self._lead(topic)
        mine.done.wait()
        if mine.error is not None:
            raise mine.error
        return mine.result

    def _lead(self, topic: str) -> None:
        """Commit the topic's queued logs, group by group, until none is queued; then rewrite and expire
        once for them all (not once per group: the waiting logs need their commits, not the upkeep)."""
        stint: list[_Waiting] = []
        while True:
            with self._guard:
                group = self._queued.pop(topic, [])
                if not group and not stint:
                    self._leading.discard(topic)
                    return
            if not group:
                self._maintain(stint)
                stint = []
                continue
            try:
                results = commit_logs([w.item for w in group], now=group[-1].now, maintain=False)
                for waiting, result in zip(group, results):
                    waiting.result = result
                stint += group
            except BaseException as exc:   # every log of the group fails with it, each in its own thread
                for waiting in group:
                    waiting.error = exc
            for waiting in group:
                waiting.done.set()

    @staticmethod
    def _maintain(stint: list[_Waiting]) -> None:
        """Rewrite the committed logs' due buckets and expire old snapshots: a re-check of the logs, which
        commits nothing new. A failure here loses nothing (every log is committed); the next commit of
        the topic maintains it again."""
        try:
            commit_logs([w.item for w in stint], now=stint[-1].now)
        except CompactionError:
            pass
