"""Topic configuration with Kafka key names (SPEC §2), and the topics file that holds it."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from compaction_assets.errors import ConfigError, first_line
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.names import check_topic
from compaction_assets.topics.landing_settings import (
    LANDING_DEFAULTS,
    NATIVE_LANDING,
    CdcFormat,
    FileFormat,
    LandingConfig,
    LandingFormat,
    parse_version_fields,
)
from compaction_assets.topics.str_enum import StrEnum

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
# The product's keys beyond Kafka's: how fresh the topic's table must be (docs/table.md, Freshness), and the
# table's name when not the topic's (None: the topic's name with each '.' as '_', table/catalog.py).
TABLE_DEFAULTS: dict[str, Any] = {"table.freshness.ms": 60_000, "table.name": None}
# A table name every catalog takes (no '.': it would separate a namespace)
TABLE_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,255}")
# Where build_config checks the store's or a file's defaults: no topic's own key (table.name) belongs there
DEFAULTS_NAMES = ("<defaults>", "_defaults")
# The landing keys (which connector wrote the landing area), after SPEC §2's table, then the table's.
ALL_KEYS = KEYS + tuple(LANDING_DEFAULTS) + tuple(TABLE_DEFAULTS)
# Every key's default, as an effective configuration shows a key it leaves out (`to_kafka` of a native topic)
ALL_DEFAULTS: dict[str, Any] = {**DEFAULTS, **LANDING_DEFAULTS, **TABLE_DEFAULTS}


class Strategy(StrEnum):
    """compaction.strategy: what makes a record the winner of its key (SPEC §6); compares equal to its name."""

    OFFSET = "offset"  # the highest offset
    TIMESTAMP = "timestamp"  # the latest timestamp, then the highest offset
    HEADER = "header"  # the highest version in the named header, then the highest offset


STRATEGIES = tuple(s.value for s in Strategy)


@dataclass(frozen=True)
class TopicConfig:
    # cleanup.policy, as Kafka's LogConfig reads it: two flags, set once when the configuration is built
    compact: bool
    delete: bool
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
    landing: LandingConfig = NATIVE_LANDING
    # table.freshness.ms: the bound on a log's table lag (docs/table.md, Freshness)
    table_freshness_ms: int = TABLE_DEFAULTS["table.freshness.ms"]
    # table.name: the topic's table's name in the catalog's namespace (None: derived from the topic's name)
    table_name: str | None = None

    @property
    def policy(self) -> frozenset[str]:
        """cleanup.policy: the policies set, by name."""
        return frozenset(name for name, on in (("compact", self.compact), ("delete", self.delete)) if on)

    @property
    def roll_interval_ms(self) -> int:
        """min(segment.ms, max.compaction.lag.ms) for compacted topics, else segment.ms (SPEC §1)."""
        return min(self.segment_ms, self.max_compaction_lag_ms) if self.compact else self.segment_ms

    def to_kafka(self) -> dict[str, Any]:
        return {
            "cleanup.policy": ",".join(p for p, on in (("compact", self.compact), ("delete", self.delete)) if on),
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
            # a native topic has no landing key to show (the common case asks the landing module nothing)
            **({} if self.landing is NATIVE_LANDING else self.landing.to_kafka()),
            # shown when set apart from the default, as the landing keys are (outputs of the default stay as they were)
            **(
                {}
                if self.table_freshness_ms == TABLE_DEFAULTS["table.freshness.ms"]
                else {"table.freshness.ms": self.table_freshness_ms}
            ),
            **({} if self.table_name is None else {"table.name": self.table_name}),
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
        if key not in DEFAULTS and key not in LANDING_DEFAULTS and key not in TABLE_DEFAULTS:
            raise _fail(topic, key, raw[key], f"unknown configuration key (valid keys: {', '.join(ALL_KEYS)})")
    v = {**DEFAULTS, **LANDING_DEFAULTS, **TABLE_DEFAULTS, **raw}
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
        raise _fail(topic, "min.compaction.lag.ms", min_lag, f"must be <= max.compaction.lag.ms ({max_lag})")
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
            raise _fail(
                topic,
                "compaction.strategy.header",
                header,
                "is required and must be a non-blank string when compaction.strategy is header",
            )
    else:
        header = None
    return TopicConfig(
        "compact" in policy,
        "delete" in policy,
        float(ratio),
        min_lag,
        max_lag,
        retention,
        seg_bytes,
        seg_ms,
        ret_ms,
        ret_bytes,
        Strategy(strategy),
        header,
        _landing(topic, v, strategy, header),
        _int(topic, "table.freshness.ms", v["table.freshness.ms"], 1, "must be >= 1"),
        _table_name(topic, v["table.name"]),
    )


def _table_name(topic: str, value: Any) -> str | None:
    """table.name: a name the catalog takes, and a topic's own (two topics of one store never share it)."""
    if value is None:
        return None
    if topic in DEFAULTS_NAMES:
        raise _fail(topic, "table.name", value, "table.name is a topic's own, not a default (one table per topic)")
    if not isinstance(value, str) or not TABLE_NAME_RE.fullmatch(value):
        raise _fail(topic, "table.name", value, "must be 1-255 characters of A-Z a-z 0-9 _ - (no '.')")
    return value


def _choice(topic: str, key: str, value: Any, enum: type[Enum]) -> Any:
    valid = [m.value for m in enum]
    if value not in valid:
        raise _fail(topic, key, value, f"must be one of {', '.join(valid)}")
    return enum(value)


def _field_name(topic: str, key: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise _fail(topic, key, value, "must be a non-blank value field name")
    return value.strip() if value is not None else None


def _landing(topic: str, v: Mapping[str, Any], strategy: str, header: str | None) -> LandingConfig:
    """The landing keys, validated in their table order."""
    if all(v[key] == default for key, default in LANDING_DEFAULTS.items()):
        return NATIVE_LANDING
    fmt = _choice(topic, "landing.format", v["landing.format"], LandingFormat)
    file_format = _choice(topic, "landing.file.format", v["landing.file.format"], FileFormat)
    if file_format is FileFormat.CSV and fmt is not LandingFormat.AIVEN:
        # Confluent's sink has no CSV format, and Lenses' writes CSV without the envelope (no key, no offset)
        raise _fail(topic, "landing.file.format", "csv", "needs landing.format aiven (only Aiven's S3 sink writes CSV)")
    offset_field = _field_name(topic, "landing.offset.field", v["landing.offset.field"])
    ts_field = _field_name(topic, "landing.timestamp.field", v["landing.timestamp.field"])
    cdc = _choice(topic, "cdc.format", v["cdc.format"], CdcFormat)
    if cdc is not CdcFormat.NONE and fmt is LandingFormat.NATIVE:
        raise _fail(
            topic,
            "cdc.format",
            cdc.value,
            "needs landing.format confluent, aiven or lenses (the native shape carries values as bytes)",
        )
    spec = v["cdc.version.fields"]
    fields: tuple = ()
    if spec is not None:
        key = "cdc.version.fields"
        if not isinstance(spec, str) or not spec.strip():
            raise _fail(topic, key, spec, "must be a comma-separated list of field paths (e.g. source.lsn)")
        if cdc is CdcFormat.NONE:
            raise _fail(topic, key, spec, "needs cdc.format debezium or debezium-flat")
        if strategy != "header":
            raise _fail(
                topic, key, spec, "needs compaction.strategy header (the version goes into compaction.strategy.header)"
            )
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
    has_defaults: bool = True  # False: the file has no `defaults` section (applying it keeps the store's)

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
    import yaml  # here: a cleaning that reads no topics file does not pay for its import

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or first_line(exc, None, blank="")
        raise ConfigError(f"topics file {str(path)!r} is not valid YAML{where}: {what}") from None
    return parse_topics(data, f"topics file {str(path)!r}")
