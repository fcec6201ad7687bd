"""Topic configuration with Kafka key names (SPEC §2), and the topics file that holds it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from compaction_assets.errors import ConfigError
from compaction_assets.log.connectors.settings import (
    LANDING_DEFAULTS,
    CdcFormat,
    FileFormat,
    LandingConfig,
    LandingFormat,
    parse_version_fields,
)
from compaction_assets.log.names import RESERVED_TOPICS, check_topic, parse_log_name
from compaction_assets.log.records import INT64_MAX

# The table of SPEC §2, in its order (the first invalid key in this order is the one reported).
DEFAULTS: dict[str, Any] = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": INT64_MAX,
    "delete.retention.ms": 86_400_000,
    "segment.bytes": 1_073_741_824,
    "segment.ms": 604_800_000,
    "retention.ms": 604_800_000,
    "retention.bytes": -1,
    "compaction.strategy": "offset",
    "compaction.strategy.header": None,
}
KEYS = tuple(DEFAULTS)
# The landing keys (issue 30: which connector wrote the landing area), after SPEC §2's table.
ALL_KEYS = KEYS + tuple(LANDING_DEFAULTS)


class Strategy(StrEnum):
    """compaction.strategy: what makes a record the winner of its key (SPEC §6); compares equal to its name."""
    OFFSET = "offset"          # the highest offset
    TIMESTAMP = "timestamp"    # the latest timestamp, then the highest offset
    HEADER = "header"          # the highest version in the named header, then the highest offset


STRATEGIES = tuple(s.value for s in Strategy)


@dataclass(frozen=True)
class TopicConfig:
    policy: frozenset[str]
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_ms: int
    retention_ms: int
    retention_bytes: int
    strategy: Strategy
    strategy_header: str | None
    landing: LandingConfig = LandingConfig()

    @property
    def compact(self) -> bool:
        return "compact" in self.policy

    @property
    def delete(self) -> bool:
        return "delete" in self.policy

    @property
    def roll_interval_ms(self) -> int:
        """min(segment.ms, max.compaction.lag.ms) for compacted topics, else segment.ms (SPEC §1)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    def to_kafka(self) -> dict[str, Any]:
        return {
            "cleanup.policy": ",".join(p for p in ("compact", "delete") if p in self.policy),
            "min.cleanable.dirty.ratio": self.min_cleanable_dirty_ratio,
            "min.compaction.lag.ms": self.min_compaction_lag_ms,
            "max.compaction.lag.ms": self.max_compaction_lag_ms,
            "delete.retention.ms": self.delete_retention_ms,
            "segment.bytes": self.segment_bytes,
            "segment.ms": self.segment_ms,
            "retention.ms": self.retention_ms,
            "retention.bytes": self.retention_bytes,
            "compaction.strategy": self.strategy.value,
            "compaction.strategy.header": self.strategy_header,
            **self.landing.to_kafka(),
        }


def _fail(topic: str, key: str, value: Any, rule: str) -> ConfigError:
    return ConfigError(f"invalid configuration for topic {topic!r}: {key}={value!r}: {rule}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(topic: str, key: str, value: Any, minimum: int, rule: str) -> int:
    if not _is_int(value):
        raise _fail(topic, key, value, "must be an integer")
    if value > INT64_MAX:
        raise _fail(topic, key, value, "must fit in a signed 64-bit integer")
    if value < minimum:
        raise _fail(topic, key, value, rule)
    return value


def _policy(topic: str, value: Any) -> frozenset[str]:
    key = "cleanup.policy"
    if isinstance(value, (list, tuple)):
        parts = list(value)
    elif isinstance(value, str):
        parts = value.split(",")
    else:
        raise _fail(topic, key, value, "must be a comma-separated list of compact and delete")
    if not all(isinstance(p, str) for p in parts):
        raise _fail(topic, key, value, "must be a comma-separated list of compact and delete")
    names = [p.strip() for p in parts]
    if not names or names == [""]:
        raise _fail(topic, key, value, "must not be empty")
    for name in names:
        if name not in ("compact", "delete"):
            raise _fail(topic, key, value, f"unknown policy {name!r} (valid: compact, delete)")
    if len(set(names)) != len(names):
        raise _fail(topic, key, value, "must not repeat a policy")
    return frozenset(names)


def build_config(raw: Mapping[str, Any] | None, topic: str = "<default>") -> TopicConfig:
    """Validate a Kafka-style mapping (missing keys take the defaults) into a TopicConfig."""
    raw = dict(raw or {})
    for key in raw:
        if key not in DEFAULTS and key not in LANDING_DEFAULTS:
            raise _fail(topic, key, raw[key], f"unknown configuration key (valid keys: {', '.join(ALL_KEYS)})")
    v = {**DEFAULTS, **LANDING_DEFAULTS, **raw}
    policy = _policy(topic, v["cleanup.policy"])

    ratio = v["min.cleanable.dirty.ratio"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or math.isnan(ratio):
        raise _fail(topic, "min.cleanable.dirty.ratio", ratio, "must be a number")
    if not 0 <= ratio <= 1:
        raise _fail(topic, "min.cleanable.dirty.ratio", ratio, "must be between 0 and 1")

    max_lag = v["max.compaction.lag.ms"]
    max_lag_ok = _is_int(max_lag) and 1 <= max_lag <= INT64_MAX
    min_lag = _int(topic, "min.compaction.lag.ms", v["min.compaction.lag.ms"], 0, "must be >= 0")
    if max_lag_ok and min_lag > max_lag:
        raise _fail(topic, "min.compaction.lag.ms", min_lag,
                    f"must be <= max.compaction.lag.ms ({max_lag})")
    max_lag = _int(topic, "max.compaction.lag.ms", max_lag, 1, "must be >= 1")
    retention = _int(topic, "delete.retention.ms", v["delete.retention.ms"], 0, "must be >= 0")
    seg_bytes = _int(topic, "segment.bytes", v["segment.bytes"], 1, "must be >= 1")
    seg_ms = _int(topic, "segment.ms", v["segment.ms"], 1, "must be >= 1")
    ret_ms = _int(topic, "retention.ms", v["retention.ms"], -1, "must be >= -1 (-1 = unlimited)")
    ret_bytes = _int(topic, "retention.bytes", v["retention.bytes"], -1, "must be >= -1 (-1 = unlimited)")

    strategy = v["compaction.strategy"]
    if strategy not in STRATEGIES:
        raise _fail(topic, "compaction.strategy", strategy, "must be one of offset, timestamp, header")
    header = v["compaction.strategy.header"]
    if strategy == "header":
        if not isinstance(header, str) or not header.strip():
            raise _fail(topic, "compaction.strategy.header", header,
                        "is required and must be a non-blank string when compaction.strategy is header")
    else:
        header = None
    return TopicConfig(policy, float(ratio), min_lag, max_lag, retention, seg_bytes, seg_ms,
                       ret_ms, ret_bytes, Strategy(strategy), header, _landing(topic, v, strategy, header))


def _choice(topic: str, key: str, value: Any, enum: type) -> Any:
    valid = [m.value for m in enum]
    if value not in valid:
        raise _fail(topic, key, value, f"must be one of {', '.join(valid)}")
    return enum(value)


def _field_name(topic: str, key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _fail(topic, key, value, "must be a non-blank value field name")
    return value.strip() if value is not None else None


def _landing(topic: str, v: Mapping[str, Any], strategy: str, header: str | None) -> LandingConfig:
    """The landing keys, validated in their table order (issue 30)."""
    fmt = _choice(topic, "landing.format", v["landing.format"], LandingFormat)
    file_format = _choice(topic, "landing.file.format", v["landing.file.format"], FileFormat)
    offset_field = _field_name(topic, "landing.offset.field", v["landing.offset.field"])
    ts_field = _field_name(topic, "landing.timestamp.field", v["landing.timestamp.field"])
    cdc = _choice(topic, "cdc.format", v["cdc.format"], CdcFormat)
    if cdc is not CdcFormat.NONE and fmt is LandingFormat.NATIVE:
        raise _fail(topic, "cdc.format", cdc.value, "needs landing.format confluent, aiven or lenses (the "
                                                    "native shape carries values as bytes)")
    spec = v["cdc.version.fields"]
    fields: tuple = ()
    if spec is not None:
        key = "cdc.version.fields"
        if not isinstance(spec, str) or not spec.strip():
            raise _fail(topic, key, spec, "must be a comma-separated list of field paths (e.g. source.lsn)")
        if cdc is CdcFormat.NONE:
            raise _fail(topic, key, spec, "needs cdc.format debezium or debezium-flat")
        if strategy != "header":
            raise _fail(topic, key, spec, "needs compaction.strategy header (the version goes into "
                                          "compaction.strategy.header)")
        try:
            fields = parse_version_fields(spec)
        except ValueError as exc:
            raise _fail(topic, key, spec, str(exc)) from None
    return LandingConfig(fmt, file_format, offset_field, ts_field, cdc, spec, fields, header)


@dataclass(frozen=True)
class TopicsFile:
    """Defaults plus per-topic overrides. A topic not listed takes the defaults."""

    defaults: Mapping[str, Any]
    topics: Mapping[str, Mapping[str, Any]]
    has_defaults: bool = True   # False: the file has no `defaults` section (applying it keeps the store's)

    def config_for(self, topic: str) -> TopicConfig:
        return build_config({**self.defaults, **(self.topics.get(topic) or {})}, topic)

    def validate(self) -> None:
        build_config(self.defaults, "<defaults>")
        for topic in self.topics:
            self.config_for(topic)


def parse_topics(data: Any, source: str = "topics file") -> TopicsFile:
    """Parse the mapping of a topics file: {defaults: {...}, topics: {name: {...}}}; validate everything."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping with 'defaults' and 'topics'")
    unknown = set(data) - {"defaults", "topics"}
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {sorted(unknown)} (expected 'defaults' and 'topics')")
    defaults = data.get("defaults") or {}
    topics = data.get("topics") or {}
    if not isinstance(defaults, dict):
        raise ConfigError(f"{source}: 'defaults' must be a mapping of Kafka configuration keys")
    if not isinstance(topics, dict):
        raise ConfigError(f"{source}: 'topics' must be a mapping of topic name to configuration")
    # YAML reads an unquoted numeric topic name (e.g. 2024) as an integer; it is still a name.
    topics = {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: v for k, v in topics.items()}
    for name, overrides in topics.items():
        check_topic(name, f"{source}: topic")
        if overrides is not None and not isinstance(overrides, dict):
            raise ConfigError(f"{source}: topic {name!r} must map to configuration keys")
    result = TopicsFile(defaults, {k: v or {} for k, v in topics.items()}, has_defaults="defaults" in data)
    try:
        result.validate()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return result


def load_topics(path: str | Path | None) -> TopicsFile:
    """Load and validate a topics file (YAML). A missing path means: defaults for every topic."""
    if path is None:
        return TopicsFile({}, {})
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read topics file {str(path)!r}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"topics file {str(path)!r} is not valid YAML{where}: {what}") from None
    return parse_topics(data, f"topics file {str(path)!r}")


# --- configuration stored with the store ---------------------------------------------------------
# As Kafka keeps topic configuration in the cluster, not in its clients, every process that opens a store
# reads the same configuration from it: `<store>/_topics/<topic>/v<N>.json`, one immutable file per
# version, created exclusively through the store's Storage (so two writers never both get version N, on a
# local disk or an object store). Store-wide defaults (for topics without their own entry) live under
# `<store>/_topics/_defaults/` ("_defaults" could be a Kafka topic name: `_` is allowed, so the name is
# reserved, log/names.py RESERVED_TOPICS, and refused as a topic everywhere a topic name is checked).

CONFIG_DIR = "_topics"
DEFAULTS_ENTRY = "_defaults"
assert DEFAULTS_ENTRY in RESERVED_TOPICS


@dataclass(frozen=True)
class StoredConfig:
    """One version of a topic's stored configuration (or of the store's defaults)."""

    topic: str                    # a topic name, or DEFAULTS_ENTRY
    version: int                  # 0: nothing stored (built-in defaults)
    settings: Mapping[str, Any]   # the Kafka keys set explicitly (resolved against DEFAULTS when used)
    changed_ms: int
    source: str                   # who changed it: "config set", "config apply topics.yaml", ...

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (what the file holds and what `config show` prints)."""
        return {"topic": self.topic, "version": self.version, "settings": dict(self.settings),
                "changed_ms": self.changed_ms, "source": self.source}


@dataclass(frozen=True)
class ConfigChange:
    """The difference one change makes to a topic's effective configuration."""

    topic: str
    before: dict[str, Any]
    after: dict[str, Any]

    @property
    def changed(self) -> dict[str, list[Any]]:
        """key -> [before, after] for the keys whose effective value changes."""
        return {k: [self.before.get(k), self.after.get(k)] for k in ALL_KEYS
                if self.before.get(k) != self.after.get(k)}


def parse_setting(assignment: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (0.5, 100, header, null)."""
    key, eq, text = assignment.partition("=")
    key = key.strip()
    if not eq or not key:
        raise ConfigError(f"{assignment!r}: expected key=value")
    if key not in DEFAULTS and key not in LANDING_DEFAULTS:
        raise ConfigError(f"{assignment!r}: unknown configuration key {key!r} (valid keys: {', '.join(ALL_KEYS)})")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError:
        value = text
    return key, value


class ConfigStore:
    """The versioned topic configuration kept inside a log store (`<store>/_topics/`)."""

    def __init__(self, storage: Any):
        self.storage = storage   # compaction_assets.log.fs.Storage (kept untyped: no import cycle)

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
            return StoredConfig(entry, int(data["version"]), dict(data["settings"]), int(data["changed_ms"]),
                                str(data["source"]))
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
        return [t for t in self.storage.list_dir(self.storage.join(CONFIG_DIR)) if t != DEFAULTS_ENTRY
                and self.versions(t)]

    def effective(self, topic: str) -> dict[str, Any]:
        """The Kafka mapping a topic uses: its own stored settings, else the stored defaults, else DEFAULTS."""
        own = self.current(topic)
        if own is not None:
            return build_config(own.settings, topic).to_kafka()
        defaults = self.current(DEFAULTS_ENTRY)
        return build_config(defaults.settings if defaults else {}, topic).to_kafka()

    def config_for(self, topic: str, proposed: "TopicsFile | None" = None, proposed_by: str = "",
                   cleaned_logs: Callable[[str], list[str]] | None = None, now_ms: int = 0) -> TopicConfig:
        """The TopicConfig every process uses for this topic's logs.

        `proposed` (a topics file named with --topics / COMPACTION_TOPICS) is never used for one run only:
        when the store holds nothing for the topic, the file's configuration is stored (a recorded change,
        version 1); when the store holds a configuration that disagrees, the call is refused."""
        check_topic(topic, "topic")
        if proposed is not None:
            wanted = self.wanted(proposed, topic)
            own = self.current(topic)
            stored = self.effective(topic)
            if wanted != stored:
                diff = ", ".join(f"{k}: stored {stored.get(k)!r}, file {wanted.get(k)!r}" for k in ALL_KEYS
                                 if stored.get(k) != wanted.get(k))
                origin = own or self.current(DEFAULTS_ENTRY)
                if origin is not None:   # the store already says something for this topic: it wins
                    where = f"version {origin.version}" + ("" if own else " of the store's defaults")
                    raise ConfigError(
                        f"{proposed_by} disagrees with the configuration stored for topic {topic!r} ({where}): "
                        f"{diff}; the stored one is what runs: `config apply` the file to change it")
                check_strategy_change(ConfigChange(topic, stored, wanted), cleaned_logs, confirm=False)
                self._write(topic, wanted, f"{proposed_by} (first use of the topic in this store)", now_ms)
            elif self.current(topic) is None and self.current(DEFAULTS_ENTRY) is None and proposed.topics.get(topic):
                self._write(topic, wanted, f"{proposed_by} (first use of the topic in this store)", now_ms)
        return build_config(self.effective(topic), topic)

    def describe(self, topic: str) -> dict[str, Any]:
        """Where a topic's configuration comes from: its version and the change that made it."""
        own = self.current(topic)
        origin = own or self.current(DEFAULTS_ENTRY)
        return {"config": self.effective(topic),
                "config_source": ("topic" if own else "store defaults" if origin else "built-in defaults"),
                "config_version": origin.version if origin else 0,
                "config_changed_ms": origin.changed_ms if origin else None,
                "config_changed_by": origin.source if origin else None}

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
        merged = {**(self.current(topic).settings if self.current(topic) else before), **settings}
        after = build_config(merged, topic).to_kafka()
        return ConfigChange(topic, before, after)

    def set_topic(self, topic: str, settings: Mapping[str, Any], source: str, now_ms: int,
                  cleaned_logs: Callable[[str], list[str]] | None = None, confirm: bool = False) -> StoredConfig:
        """Store a new version of a topic's configuration (its current settings updated with `settings`);
        a change that changes nothing stores no version and returns the current one."""
        change = self.plan_set(topic, settings)
        own = self.current(topic)
        if own is not None and build_config(own.settings, topic).to_kafka() == change.after:
            return own
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
                after = before   # a topic stored on its own and absent from the file keeps its settings
            else:
                after = build_config(new_defaults, topic).to_kafka()
            changes.append(ConfigChange(topic, before, after))
        return changes

    def apply(self, topics: TopicsFile, source: str, now_ms: int, known_topics: list[str] = (),
              cleaned_logs: Callable[[str], list[str]] | None = None, confirm: bool = False) -> list[ConfigChange]:
        """Store the topics file: its defaults and each topic it lists whose configuration changes."""
        changes = self.plan_apply(topics, list(known_topics))
        for change in changes:   # all refused before anything is written
            check_strategy_change(change, cleaned_logs, confirm)
        defaults = self.plan_defaults(topics)
        if topics.has_defaults and (defaults.changed or self.current(DEFAULTS_ENTRY) is None):
            self._write(DEFAULTS_ENTRY, defaults.after, source, now_ms)
        for change in changes:
            if change.topic in topics.topics and (change.changed or self.current(change.topic) is None):
                self._write(change.topic, change.after, source, now_ms)
        return [c for c in changes if c.changed]


def check_strategy_change(change: ConfigChange, cleaned_logs: Callable[[str], list[str]] | None,
                          confirm: bool) -> None:
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
            "deleted do not come back; repeat with --confirm to change it anyway")


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
