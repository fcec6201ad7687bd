"""Topic configuration stored with the store (as Kafka keeps it in the cluster): versions, defaults, changes."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from compaction_assets.errors import ConfigError
from compaction_assets.store.names import RESERVED_TOPICS, check_topic, parse_log_name
from compaction_assets.topics.config import ALL_DEFAULTS, ALL_KEYS, TopicConfig, TopicsFile, build_config
from compaction_assets.topics.str_enum import StrEnum

# --- configuration stored with the store ---------------------------------------------------------
# As Kafka keeps topic configuration in the cluster, not in its clients, every process that opens a store
# reads the same configuration from it: `<store>/_topics/<topic>/v<N>.json`, one immutable file per
# version, created exclusively through the store's Storage (so two writers never both get version N, on a
# local disk or an object store). Store-wide defaults (for topics without their own entry) live under
# `<store>/_topics/_defaults/` ("_defaults" could be a Kafka topic name: `_` is allowed, so the name is
# reserved, store/names.py RESERVED_TOPICS, and refused as a topic everywhere a topic name is checked).

CONFIG_DIR = "_topics"
DEFAULTS_ENTRY = "_defaults"
assert DEFAULTS_ENTRY in RESERVED_TOPICS


@dataclass(frozen=True)
class StoredConfig:
    """One version of a topic's stored configuration (or of the store's defaults)."""

    topic: str  # a topic name, or DEFAULTS_ENTRY
    version: int  # 0: nothing stored (built-in defaults)
    settings: Mapping[str, Any]  # the Kafka keys set explicitly (resolved against DEFAULTS when used)
    changed_ms: int
    source: str  # who changed it: "config set", "config apply topics.yaml", ...

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (what the file holds and what `config show` prints)."""
        return {
            "topic": self.topic,
            "version": self.version,
            "settings": dict(self.settings),
            "changed_ms": self.changed_ms,
            "source": self.source,
        }


class ConfigSource(StrEnum):
    """Which entry a topic's effective configuration comes from."""

    TOPIC = "topic"  # its own stored entry
    STORE_DEFAULTS = "store defaults"  # the store's defaults entry (the topic has none of its own)
    BUILT_IN = "built-in defaults"  # nothing stored


@dataclass(frozen=True)
class ConfigOrigin:
    """A topic's effective configuration and where it comes from: its entry, version and the change that made it."""

    config: dict[str, Any]  # the effective configuration, by Kafka's names
    source: ConfigSource
    version: int  # 0: nothing stored (built-in defaults)
    changed_ms: int | None  # None: nothing stored
    changed_by: str | None  # the change's source ("config apply topics.yaml", ...); None: nothing stored

    def as_document(self) -> dict[str, Any]:
        """The JSON `describe` and `config show` print, by their keys."""
        return {
            "config": self.config,
            "config_source": self.source.value,
            "config_version": self.version,
            "config_changed_ms": self.changed_ms,
            "config_changed_by": self.changed_by,
        }


@dataclass(frozen=True)
class ConfigChange:
    """The difference one change makes to a topic's effective configuration."""

    topic: str
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def changed(self) -> dict[str, list[Any]]:
        """key -> [before, after] for the keys whose effective value changes; a key a mapping leaves out (a
        native topic shows no landing key) has its default value, shown as it is (`native`, not null)."""
        before, after = {**ALL_DEFAULTS, **self.before}, {**ALL_DEFAULTS, **self.after}
        return {k: [before[k], after[k]] for k in ALL_KEYS if before[k] != after[k]}


def parse_setting(assignment: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (0.5, 100, header, null)."""
    key, eq, text = assignment.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ConfigError(f"{assignment!r}: expected key=value")
    if key not in ALL_KEYS:
        raise ConfigError(f"{assignment!r}: unknown configuration key {key!r} (valid keys: {', '.join(ALL_KEYS)})")
    import yaml  # (only the command line's settings need it: a cleaning does not pay for its import)

    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key, value


class ConfigStore:
    """The versioned topic configuration kept inside a log store (`<store>/_topics/`)."""

    def __init__(self, storage: Any):
        self.storage = storage  # compaction_assets.store.fs.Storage (kept untyped: no import cycle)

    def _dir(self, entry: str) -> str:
        return self.storage.join(CONFIG_DIR, entry)

    def versions(self, entry: str) -> list[int]:
        """The stored versions of a topic's (or the defaults') configuration, oldest first."""
        out = []
        for name in self.storage.list_dir(self._dir(entry)):
            if name.startswith("v") and name.endswith(".json") and name[1:-5].isdigit():
                out.append(int(name[1:-5]))
        return sorted(out)

    def read(self, entry: str, version: int) -> StoredConfig:
        """One stored version; a file that does not read back is a one-line ConfigError naming it."""
        path = self.storage.join(CONFIG_DIR, entry, f"v{version}.json")
        try:
            data = json.loads(self.storage.read_bytes(path))
            return StoredConfig(
                entry, int(data["version"]), dict(data["settings"]), int(data["changed_ms"]), str(data["source"])
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"stored configuration {path!r} cannot be read: {exc}") from None

    def current(self, entry: str) -> StoredConfig | None:
        """The newest stored version, or None when nothing is stored."""
        versions = self.versions(entry)
        return self.read(entry, versions[-1]) if versions else None

    def history(self, entry: str) -> list[StoredConfig]:
        """Every stored version, oldest first."""
        return [self.read(entry, v) for v in self.versions(entry)]

    def topics(self) -> list[str]:
        """Topics with a stored configuration of their own."""
        return [
            t for t in self.storage.list_dir(self.storage.join(CONFIG_DIR)) if t != DEFAULTS_ENTRY and self.versions(t)
        ]

    def remove(self, topic: str) -> int:
        """Remove every stored version of a topic's configuration (its deletion); how many there were."""
        check_topic(topic, "topic")
        versions = len(self.versions(topic))
        self.storage.delete(self._dir(topic))
        return versions

    def effective(self, topic: str) -> dict[str, Any]:
        """The Kafka mapping a topic uses: its own stored settings, else the stored defaults, else DEFAULTS."""
        own = self.current(topic)
        if own is not None:
            return build_config(own.settings, topic).to_kafka()
        defaults = self.current(DEFAULTS_ENTRY)
        return build_config(defaults.settings if defaults else {}, topic).to_kafka()

    def config_for(self, topic: str) -> TopicConfig:
        """The TopicConfig every process uses for this topic's logs: the stored one (a topics file is an
        input that `config apply`, or a deployment when its file changes, stores first: topics/applied_file.py)."""
        check_topic(topic, "topic")
        return build_config(self.effective(topic), topic)

    def version_mark(self, topic: str) -> str:
        """Which stored version a topic runs with, in a few characters, from listings alone: `t3` (its own
        version 3), `d2` (the store's defaults, version 2) or `b0` (built-in). Run keys carry it, so that a run
        that failed on configuration is requested again once the configuration changes (defs/automation/sensors.py)."""
        own = self.versions(topic)
        if own:
            return f"t{own[-1]}"
        defaults = self.versions(DEFAULTS_ENTRY)
        return f"d{defaults[-1]}" if defaults else "b0"

    def describe(self, topic: str) -> ConfigOrigin:
        """Where a topic's configuration comes from: its version and the change that made it."""
        own = self.current(topic)
        origin = own or self.current(DEFAULTS_ENTRY)
        source = ConfigSource.TOPIC if own else ConfigSource.STORE_DEFAULTS if origin else ConfigSource.BUILT_IN
        return ConfigOrigin(
            config=self.effective(topic),
            source=source,
            version=origin.version if origin else 0,
            changed_ms=origin.changed_ms if origin else None,
            changed_by=origin.source if origin else None,
        )

    def _write(self, entry: str, settings: Mapping[str, Any], source: str, now_ms: int) -> StoredConfig:
        self.storage.makedirs(self._dir(entry))
        for _ in range(20):
            current = self.versions(entry)
            version = (current[-1] if current else 0) + 1
            stored = StoredConfig(entry, version, dict(settings), now_ms, source)
            path = self.storage.join(CONFIG_DIR, entry, f"v{version}.json")
            if self.storage.create_exclusive(path, json.dumps(stored.as_dict(), indent=2).encode()):
                return stored
        raise ConfigError(f"configuration of {entry!r}: too many concurrent changes")

    def plan_set(self, topic: str, settings: Mapping[str, Any]) -> ConfigChange:
        """What `set_topic` would change (validated; nothing written)."""
        check_topic(topic, "topic")
        before = self.effective(topic)
        own = self.current(topic)
        merged = {**(own.settings if own else before), **settings}
        after = build_config(merged, topic).to_kafka()
        return ConfigChange(topic, before, after)

    def set_topic(
        self,
        topic: str,
        settings: Mapping[str, Any],
        source: str,
        now_ms: int,
        cleaned_logs: Callable[[str], list[str]] | None = None,
        confirm: bool = False,
    ) -> StoredConfig | None:
        """Store a new version of a topic's configuration (its current settings updated with `settings`);
        None when no effective value changes: nothing is stored (a set equal to a default pins nothing)."""
        change = self.plan_set(topic, settings)
        if not change.changed:
            return None
        check_strategy_change(change, cleaned_logs, confirm)
        return self._write(topic, change.after, source, now_ms)

    def wanted(self, topics: TopicsFile, topic: str) -> dict[str, Any]:
        """The Kafka mapping a topics file gives a topic; a file without a `defaults` section builds on the
        store's defaults (it keeps them), not on the built-in ones."""
        if topics.has_defaults:
            return topics.config_for(topic).to_kafka()
        stored = self.current(DEFAULTS_ENTRY)
        base = build_config(stored.settings if stored else {}, topic).to_kafka()
        return build_config({**base, **(topics.topics.get(topic) or {})}, topic).to_kafka()

    def plan_defaults(self, topics: TopicsFile) -> ConfigChange:
        """What applying the file does to the store's defaults: a file without a `defaults` section keeps them."""
        stored = self.current(DEFAULTS_ENTRY)
        before = build_config(stored.settings if stored else {}, DEFAULTS_ENTRY).to_kafka()
        after = build_config(topics.defaults, DEFAULTS_ENTRY).to_kafka() if topics.has_defaults else before
        return ConfigChange(DEFAULTS_ENTRY, before, after)

    def plan_apply(self, topics: TopicsFile, known_topics: list[str]) -> list[ConfigChange]:
        """The changes applying a topics file makes: to every topic it lists, and to `known_topics`
        (topics with logs in the store) through the defaults."""
        topics.validate()
        listed = set(topics.topics)
        new_defaults = self.plan_defaults(topics).after
        changes = []
        for topic in sorted(listed | set(known_topics) | set(self.topics())):
            before = self.effective(topic)
            if topic in listed:
                after = self.wanted(topics, topic)
            elif self.current(topic) is not None:
                after = before  # a topic stored on its own and absent from the file keeps its settings
            else:
                after = build_config(new_defaults, topic).to_kafka()
            changes.append(ConfigChange(topic, before, after))
        return changes

    def apply(
        self,
        topics: TopicsFile,
        source: str,
        now_ms: int,
        known_topics: Sequence[str] = (),
        cleaned_logs: Callable[[str], list[str]] | None = None,
        confirm: bool = False,
    ) -> list[ConfigChange]:
        """Store the topics file: its defaults and each topic it lists whose configuration changes."""
        changes = self.plan_apply(topics, list(known_topics))
        for change in changes:  # all refused before anything is written
            check_strategy_change(change, cleaned_logs, confirm)
        defaults = self.plan_defaults(topics)
        if topics.has_defaults and (defaults.changed or self.current(DEFAULTS_ENTRY) is None):
            self._write(DEFAULTS_ENTRY, defaults.after, source, now_ms)
        for change in changes:
            if change.topic in topics.topics and (change.changed or self.current(change.topic) is None):
                self._write(change.topic, change.after, source, now_ms)
        return [c for c in changes if c.changed]


def check_strategy_change(change: ConfigChange, cleaned_logs: Callable[[str], list[str]] | None, confirm: bool) -> None:
    """Refuse, unless confirmed, a change of compaction.strategy(.header) for a topic whose logs were cleaned:
    the records those cleanings removed were chosen by the old strategy and cannot come back."""
    keys = [k for k in ("compaction.strategy", "compaction.strategy.header") if k in change.changed]
    if not keys or confirm or cleaned_logs is None:
        return
    logs = cleaned_logs(change.topic)
    if logs:
        what = ", ".join(f"{k} {change.before[k]!r} -> {change.after[k]!r}" for k in keys)
        raise ConfigError(
            f"topic {change.topic!r}: {what} changes which records win on logs already cleaned with the old "
            f"strategy ({', '.join(logs[:5])}{' ...' if len(logs) > 5 else ''}); the records those cleanings "
            "deleted do not come back; repeat with --confirm to change it anyway"
        )


def logged_topics(store: Any) -> list[str]:
    """For a LogStore: the topics it holds logs of."""
    return sorted({parse_log_name(name)[0] for name in store.logs()})


def cleaned_logs_of(store: Any) -> Callable[[str], list[str]]:
    """For a LogStore: topic -> names of its logs that have been cleaned at least once."""

    def logs(topic: str) -> list[str]:
        out = []
        for name in store.logs():
            if parse_log_name(name)[0] == topic:
                m = store.log(name).manifest()
                if m.checkpoint > 0 or m.last_cleaning:
                    out.append(name)
        return out

    return logs
