"""What a store remembers of its deleted topics: the landing files each had when it was deleted, so that the
next ingestion does not re-create the topic from files it had already taken in (or had been deleted with).

`<store>/_deleted_topics/<topic>.json` holds, per log, the landing files present at the deletion with their
modification times. A file is set aside when its name and its modification time are the recorded ones: a
file landed after the deletion (a new name, or a name written again, as a sink re-writes its first file
for a re-created Kafka topic) creates the topic anew, as a producer re-creates a deleted Kafka topic.
A topic deleted twice keeps the files of both deletions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from compaction_assets.errors import CorruptLogError
from compaction_assets.store.names import check_topic

DELETED_DIR = "_deleted_topics"


@dataclass(frozen=True)
class DeletedTopic:
    """One deleted topic: when, and the landing files of each of its logs then ({log: {name: mtime_ms}})."""

    topic: str
    deleted_ms: int
    files: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    def set_aside(self, log: str, name: str, mtime_ms: int) -> bool:
        """Whether the landed file `name` of `log`, modified at `mtime_ms`, went with the deletion."""
        return self.files.get(log, {}).get(name) == mtime_ms

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "deleted_ms": self.deleted_ms,
            "files": {k: dict(v) for k, v in self.files.items()},
        }


class DeletedTopics:
    """The deleted topics' records of a store (`<store>/_deleted_topics/`)."""

    def __init__(self, storage: Any):
        self.storage = storage  # compaction_assets.store.fs.Storage

    def _path(self, topic: str) -> str:
        return self.storage.join(DELETED_DIR, f"{check_topic(topic)}.json")

    def read(self, topic: str) -> DeletedTopic | None:
        """The topic's record; None when it was never deleted."""
        try:
            data = json.loads(self.storage.read_bytes(self._path(topic)))
            return DeletedTopic(data["topic"], int(data["deleted_ms"]), data["files"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorruptLogError(
                f"record of deleted topic {topic!r} ({self._path(topic)}) cannot be read: {exc}"
            ) from None

    def all(self) -> dict[str, DeletedTopic]:
        """Every deleted topic's record, by topic."""
        topics = [
            n[: -len(".json")] for n in self.storage.list_dir(self.storage.join(DELETED_DIR)) if n.endswith(".json")
        ]
        records = {t: self.read(t) for t in topics if not t.startswith(".")}
        return {t: r for t, r in records.items() if r is not None}

    def record(self, topic: str, deleted_ms: int, files: Mapping[str, Mapping[str, int]]) -> DeletedTopic:
        """Record the topic's deletion with its logs' landing files (merged with an earlier deletion's)."""
        earlier = self.read(topic)
        merged: dict[str, dict[str, int]] = {
            log: dict(names) for log, names in (earlier.files if earlier else {}).items()
        }
        for log, names in files.items():
            merged.setdefault(log, {}).update(names)
        record = DeletedTopic(topic, deleted_ms, merged)
        self.storage.makedirs(self.storage.join(DELETED_DIR))
        self.storage.write_atomic(self._path(topic), json.dumps(record.as_dict(), indent=2).encode())
        return record
