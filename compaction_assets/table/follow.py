"""The tables follow the logs: after any change a log commits (an append, an ingestion, a cleaning,
retention, a log-start move), its topic's table is brought to the log's new version, whether or not the
log is due for a cleaning. The table holds the latest state of every committed record (Kafka's consumer
view); the cleaner only shrinks the log.

`follow_logs` is what the shells call after a change: the logs of each topic in one snapshot
(`commit_logs`), and nothing built when the table already reflects every log's version: the current
snapshot's marks (summary.py) are read before any latest state is, so a call after a change that
committed nothing costs a catalog read. A topic whose commit fails leaves its table behind (the next
commit of its logs catches up, from the latest state) and does not stop the other topics'; when what
stopped it is one log's own data (a file that cannot be read), its logs are committed one at a time, so
the others' table follows and the error names the log at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from compaction_assets import settings
from compaction_assets.errors import CompactionError, CorruptLogError, first_line
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import TableError
from compaction_assets.table.commit.commit import CommitResult, LogCommit, commit_logs
from compaction_assets.table.reading.lag import topic_snapshot

TABLES_OFF = "tables are off (COMPACTION_TABLES)"


@dataclass(frozen=True)
class TopicFollow:
    """What following did for one topic's logs: a result per log (committed or already reflected), or the
    one-line error that left the table behind."""

    topic: str
    logs: tuple[str, ...]
    results: tuple[CommitResult, ...] = ()
    error: CompactionError | None = None


@dataclass(frozen=True)
class FollowResult:
    """What following did for a set of logs, per topic (per log of a topic that one log's data stopped);
    `skipped` says why nothing was tried."""

    topics: tuple[TopicFollow, ...] = ()
    skipped: str | None = None

    def result_of(self, log: str) -> CommitResult | None:
        """The log's commit result (None: skipped, failed, or not one of the logs)."""
        return next((r for t in self.topics for r in t.results if r.log == log), None)

    def error_of(self, log: str) -> CompactionError | None:
        """The error that left the log's table behind (None: none)."""
        return next((t.error for t in self.topics if log in t.logs and t.error is not None), None)

    @property
    def errors(self) -> list[CompactionError]:
        """The topics' errors, in order."""
        return [t.error for t in self.topics if t.error is not None]


def follow_logs(logs: Sequence[LogCommit], *, now: int | None = None, enabled: bool | None = None) -> FollowResult:
    """Bring each log's topic's table to the log's current version (the manifest of its LogCommit when
    given), one snapshot per topic; `enabled` False (or, when None, COMPACTION_TABLES off) skips it.
    Logs that do not exist yet (version 0) are left out."""
    if enabled is None:
        enabled = settings.current().tables.enabled
    if not enabled:
        return FollowResult(skipped=TABLES_OFF)
    by_topic: dict[str, list[LogCommit]] = {}
    for item in logs:
        manifest = item.manifest or item.handle.manifest()
        if manifest.version > 0:
            by_topic.setdefault(parse_log_name(item.handle.name)[0], []).append(replace(item, manifest=manifest))
    return FollowResult(tuple(done for topic, items in by_topic.items() for done in _follow_apart(topic, items, now)))


def _follow_apart(topic: str, items: list[LogCommit], now: int | None) -> list[TopicFollow]:
    """The topic's logs in one snapshot; when a log's own data stopped it, each log on its own (the good
    ones' table committed, the bad one's error its own)."""
    together = _follow_topic(topic, items, now)
    if isinstance(together.error, CorruptLogError) and len(items) > 1:
        return [_follow_topic(topic, [item], now) for item in items]
    return [together]


def _follow_topic(topic: str, items: list[LogCommit], now: int | None) -> TopicFollow:
    """One topic's logs: those the current snapshot reflects at their version are left alone (no state
    built, no upkeep), the others committed in one snapshot."""
    names = tuple(item.handle.name for item in items)
    try:
        current = topic_snapshot(items[0].handle.st, topic, items[0].config.table_name)
        behind = [item for item in items if _behind(item, current.marks)]
        results = commit_logs(behind, now=now) if behind else []
    except CompactionError as exc:
        return TopicFollow(topic, names, error=exc)
    except Exception as exc:  # a library's own error: the log's change stands, so it is reported, not raised
        return TopicFollow(topic, names, error=TableError(f"table of topic {topic!r}: {first_line(exc)}"))
    committed = {r.log: r for r in results}
    versions = {log: mark.version for log, mark in current.marks.items()}
    return TopicFollow(
        topic,
        names,
        tuple(
            committed.get(name)
            or CommitResult(
                current.ident, name, current.marks[name].version, False, current.snapshot_id, log_versions=versions
            )
            for name in names
        ),
    )


def _behind(item: LogCommit, marks: dict) -> bool:
    """True when the table's marks do not reflect the log's version (its LogCommit's manifest)."""
    assert item.manifest is not None  # follow_logs set it
    mark = marks.get(item.handle.name)
    return mark is None or mark.version < item.manifest.version
