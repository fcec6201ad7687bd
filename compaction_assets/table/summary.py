"""What a snapshot of a topic's table records in its summary: the logs it reflects, and what it committed.

Every snapshot the product writes records the manifest version and offsets of every log of the topic it
reflects (`compaction.logs`, carried from snapshot to snapshot), which logs it committed and at which
versions, and how many rows it added and deleted. A commit reads the marks of the current snapshot to know
which logs are behind (commit/commit.py); the history and time travel read them back (reading/read.py).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table.snapshots import Snapshot

LOGS = "compaction.logs"  # JSON {log: {"version", "log_start_offset", "log_end_offset", "removals"}}
LOG = "compaction.log"  # the log this snapshot committed
LOG_VERSION = "compaction.log-version"
ROWS_ADDED = "compaction.rows-added"
ROWS_DELETED = "compaction.rows-deleted"


@dataclass(frozen=True)
class LogMark:
    """What a snapshot reflects of one log: its manifest version, offsets and removals count (None: a mark
    written before the count was recorded)."""

    version: int
    log_start_offset: int
    log_end_offset: int
    removals: int | None = None


def _properties(snapshot: Snapshot | None) -> dict[str, str]:
    """The properties of a snapshot's summary beside its operation ({} for none, or no summary)."""
    summary = snapshot.summary if snapshot is not None else None
    return summary.additional_properties if summary is not None else {}


def marks_of(snapshot: Snapshot | None) -> dict[str, LogMark]:
    """The logs a snapshot reflects, from its summary ({} for none, or a snapshot the product did not write)."""
    raw = _properties(snapshot).get(LOGS)
    return {log: LogMark(**mark) for log, mark in json.loads(raw).items()} if raw else {}


def carried_marks(snapshot: Snapshot) -> dict[str, str]:
    """The marks property of `snapshot` as a snapshot that commits no log carries it ({} when it has none)."""
    properties = _properties(snapshot)
    return {LOGS: properties[LOGS]} if LOGS in properties else {}


def commit_summary(marks: dict[str, LogMark], versions: dict[str, int], added: int, deleted: int) -> dict[str, str]:
    """The summary properties of a snapshot reflecting `marks`, committing the logs of `versions` (in order, at
    those manifest versions), with `added` and `deleted` rows."""
    return {
        LOGS: json.dumps({k: asdict(v) for k, v in sorted(marks.items())}, separators=(",", ":")),
        LOG: ",".join(versions),
        LOG_VERSION: ",".join(str(v) for v in versions.values()),
        ROWS_ADDED: str(added),
        ROWS_DELETED: str(deleted),
    }
