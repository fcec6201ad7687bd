"""A topics file applied to a store: stored when an operator asks (`config apply`, `apply_topics_config_job`,
the demo), and, for a deployment's file (COMPACTION_TOPICS, the CLI's --topics), when its content changes.

The stored configuration is what runs (topics/config_store.py). A deployment names a file so that a new
store, or a new version of the file, gets its configuration without a separate step. Applying the same file
again at every start would undo each `config set` made since, and refusing to run while the two differ
stopped work over a difference the operator made on purpose. So every application is recorded per file (its
absolute path and the digest of its parsed content, so a comment is not a change), and a deployment applies
its file only when that content differs from the one last applied from that path. A file that cannot be
applied (invalid, or a strategy change on cleaned logs that needs `--confirm`) is reported and not recorded:
the stored configuration goes on running, and the next process reports it again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from compaction_assets.errors import ConfigError
from compaction_assets.topics.config import TopicsFile, load_topics
from compaction_assets.topics.config_store import CONFIG_DIR, DEFAULTS_ENTRY, ConfigChange, ConfigStore

# `<store>/_topics/_defaults/applied/<digest of the file's path>.json`: under the reserved defaults entry, so
# no topic's folder can hold it, and beside the versions (whose names are v<N>.json) without being one.
APPLIED_DIR = "applied"


@dataclass(frozen=True)
class AppliedFile:
    """The content of a topics file last applied to the store from one path."""

    path: str  # absolute
    digest: str  # sha256 of the parsed content (topics_digest)
    applied_ms: int
    source: str  # who applied it: "config apply ...", "COMPACTION_TOPICS ...", "demo ..."

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "digest": self.digest, "applied_ms": self.applied_ms, "source": self.source}


@dataclass(frozen=True)
class FileApplication:
    """What a deployment's topics file did to the store when a process first read a configuration."""

    path: str
    applied: bool  # True: this call stored the file's content (`changes`: the effective values it changed)
    changes: tuple[ConfigChange, ...] = ()
    refusal: str | None = None  # why the file was not applied; the stored configuration runs

    def summary(self) -> str:
        """One line for a log or stderr; empty when there is nothing to say (the file was applied before)."""
        if self.refusal is not None:
            return f"topics file {self.path!r} not applied ({self.refusal}); the stored configuration runs"
        if not self.applied:
            return ""
        changed = "; ".join(f"{c.topic}: {c.changed}" for c in self.changes) or "no value changes"
        return f"topics file {self.path!r} applied to the store: {changed}"


def topics_digest(topics: TopicsFile) -> str:
    """The digest of a topics file's parsed content (its comments and layout do not count)."""
    content = {"defaults": topics.defaults, "topics": topics.topics, "has_defaults": topics.has_defaults}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


class AppliedFiles:
    """The record of which content was last applied from each topics file's path."""

    def __init__(self, configs: ConfigStore):
        self.storage = configs.storage

    def _record_path(self, path: str) -> str:
        name = hashlib.sha256(os.path.abspath(path).encode()).hexdigest()[:24]
        return self.storage.join(CONFIG_DIR, DEFAULTS_ENTRY, APPLIED_DIR, f"{name}.json")

    def last(self, path: str) -> AppliedFile | None:
        """What was last applied from `path`; None when nothing was (or its record does not read back: the
        file is then applied again, which stores nothing when the store already says the same)."""
        try:
            data = json.loads(self.storage.read_bytes(self._record_path(path)))
            return AppliedFile(str(data["path"]), str(data["digest"]), int(data["applied_ms"]), str(data["source"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record(self, path: str, digest: str, source: str, now_ms: int) -> AppliedFile:
        applied = AppliedFile(os.path.abspath(path), digest, now_ms, source)
        self.storage.makedirs(self.storage.join(CONFIG_DIR, DEFAULTS_ENTRY, APPLIED_DIR))
        self.storage.write_atomic(self._record_path(path), json.dumps(applied.as_dict(), indent=2).encode())
        return applied

    def all(self) -> list[AppliedFile]:
        """Every path's record, by path (what `config show` lists)."""
        out = []
        for name in self.storage.list_dir(self.storage.join(CONFIG_DIR, DEFAULTS_ENTRY, APPLIED_DIR)):
            try:
                data = json.loads(
                    self.storage.read_bytes(self.storage.join(CONFIG_DIR, DEFAULTS_ENTRY, APPLIED_DIR, name))
                )
                out.append(AppliedFile(data["path"], data["digest"], int(data["applied_ms"]), data["source"]))
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a record that does not read back only means that file is applied again
        return sorted(out, key=lambda a: a.path)


def apply_topics_file(
    configs: ConfigStore,
    path: str,
    source: str,
    now_ms: int,
    known_topics: Sequence[str],
    cleaned_logs: Callable[[str], list[str]] | None,
    confirm: bool = False,
) -> list[ConfigChange]:
    """An operator's apply of a topics file (`config apply`): stored whatever was applied before, and recorded,
    so that a deployment naming the same file does not apply it again."""
    topics = load_topics(path)
    changes = configs.apply(topics, source, now_ms, known_topics, cleaned_logs, confirm)
    AppliedFiles(configs).record(path, topics_digest(topics), source, now_ms)
    return changes


def apply_when_changed(
    configs: ConfigStore,
    path: str,
    source: str,
    now_ms: int,
    known_topics: Callable[[], Sequence[str]],
    cleaned_logs: Callable[[str], list[str]] | None,
) -> FileApplication:
    """A deployment's topics file, applied when its content differs from the one last applied from its path;
    never raises for the file: a file that cannot be applied is a refusal in the result."""
    try:
        topics = load_topics(path)
    except ConfigError as exc:
        return FileApplication(path, applied=False, refusal=str(exc))
    digest = topics_digest(topics)
    files = AppliedFiles(configs)
    last = files.last(path)
    if last is not None and last.digest == digest:
        return FileApplication(path, applied=False)
    try:
        changes = configs.apply(topics, source, now_ms, known_topics(), cleaned_logs)
    except ConfigError as exc:
        return FileApplication(path, applied=False, refusal=str(exc))
    files.record(path, digest, source, now_ms)
    return FileApplication(path, applied=True, changes=tuple(changes))
