"""SPEC §2: topic configuration with Kafka key names, and the topics file that holds it.

Every refusal must name the topic, the key, the value and the rule; with several invalid keys the
first one in the order of the SPEC table is reported.
"""

from __future__ import annotations

import math
import re

import pytest

from compaction_assets.errors import CompactionError, ConfigError
from compaction_assets.topics.config import DEFAULTS, INT64_MAX, KEYS, build_config, load_topics, parse_topics
from compaction_assets.topics.landing_settings import NATIVE_LANDING, LandingFormat

TABLE_ORDER = [
    "cleanup.policy",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "segment.bytes",
    "segment.ms",
    "retention.ms",
    "retention.bytes",
    "compaction.strategy",
    "compaction.strategy.header",
]


def refused(raw, topic="orders"):
    with pytest.raises(ConfigError) as info:
        build_config(raw, topic)
    return str(info.value)


def assert_names(msg: str, topic: str, key: str, value, rule: str | None = None) -> None:
    assert topic in msg, msg
    assert key in msg, msg
    assert repr(value) in msg or str(value) in msg, msg
    if rule is not None:
        assert re.search(rule, msg), f"rule {rule!r} not stated in: {msg}"


# --- defaults ---------------------------------------------------------------------------------------


def test_key_table_matches_spec_order_and_defaults():
    assert list(KEYS) == TABLE_ORDER
    cfg = build_config({})
    assert cfg.policy == frozenset({"compact"})
    assert cfg.min_cleanable_dirty_ratio == 0.5
    assert cfg.min_compaction_lag_ms == 0
    assert cfg.max_compaction_lag_ms == INT64_MAX == 9223372036854775807
    assert cfg.delete_retention_ms == 86_400_000
    assert cfg.segment_bytes == 1_073_741_824
    assert cfg.segment_ms == 604_800_000
    assert cfg.retention_ms == 604_800_000
    assert cfg.retention_bytes == -1
    assert cfg.strategy == "offset"
    assert cfg.strategy_header is None
    assert build_config(None) == cfg
    assert DEFAULTS["cleanup.policy"] == "compact"


def test_boundary_values_are_accepted():
    cfg = build_config(
        {
            "min.cleanable.dirty.ratio": 0,
            "min.compaction.lag.ms": 0,
            "max.compaction.lag.ms": 1,
            "delete.retention.ms": 0,
            "segment.bytes": 1,
            "segment.ms": 1,
            "retention.ms": -1,
            "retention.bytes": -1,
        }
    )
    assert (cfg.min_cleanable_dirty_ratio, cfg.max_compaction_lag_ms, cfg.segment_bytes, cfg.segment_ms) == (0, 1, 1, 1)
    assert build_config({"min.cleanable.dirty.ratio": 1}).min_cleanable_dirty_ratio == 1.0
    assert build_config({"min.cleanable.dirty.ratio": 0.25}).min_cleanable_dirty_ratio == 0.25
    # min lag may equal max lag
    cfg = build_config({"min.compaction.lag.ms": 5000, "max.compaction.lag.ms": 5000})
    assert cfg.min_compaction_lag_ms == cfg.max_compaction_lag_ms == 5000
    big = build_config(
        {
            "max.compaction.lag.ms": INT64_MAX,
            "min.compaction.lag.ms": INT64_MAX,
            "retention.ms": INT64_MAX,
            "retention.bytes": INT64_MAX,
        }
    )
    assert big.min_compaction_lag_ms == INT64_MAX
    assert build_config({"retention.ms": 0, "retention.bytes": 0}).retention_ms == 0


# --- each invalid value is refused, naming topic, key, value and rule -------------------------------

INVALID = [
    ("min.cleanable.dirty.ratio", -0.01, r"between 0 and 1|0 ?(<=|≤) ?r ?(<=|≤) ?1"),
    ("min.cleanable.dirty.ratio", 1.01, r"between 0 and 1|0 ?(<=|≤) ?r ?(<=|≤) ?1"),
    ("min.cleanable.dirty.ratio", math.inf, r"between 0 and 1|0 ?(<=|≤) ?r ?(<=|≤) ?1|number"),
    ("min.compaction.lag.ms", -1, r">= ?0|≥ ?0|non-negative"),
    ("max.compaction.lag.ms", 0, r">= ?1|≥ ?1|positive"),
    ("max.compaction.lag.ms", -5, r">= ?1|≥ ?1|positive"),
    ("delete.retention.ms", -1, r">= ?0|≥ ?0|non-negative"),
    ("segment.bytes", 0, r">= ?1|≥ ?1|positive"),
    ("segment.ms", 0, r">= ?1|≥ ?1|positive"),
    ("retention.ms", -2, r">= ?-1|≥ ?-1"),
    ("retention.bytes", -2, r">= ?-1|≥ ?-1"),
    ("compaction.strategy", "version", r"offset.*timestamp.*header"),
    ("compaction.strategy", "Offset", r"offset.*timestamp.*header"),
    ("compaction.strategy", "", r"offset.*timestamp.*header"),
]


@pytest.mark.parametrize("key,value,rule", INVALID, ids=[f"{k}={v!r}" for k, v, _ in INVALID])
def test_invalid_value_refused_with_topic_key_value_rule(key, value, rule):
    msg = refused({key: value}, topic="payments")
    assert_names(msg, "payments", key, value, rule)


INT_KEYS = [
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "segment.bytes",
    "segment.ms",
    "retention.ms",
    "retention.bytes",
]
NOT_INTEGERS = [True, False, "100", "1000ms", 1.5, 0.5, None, [100]]


@pytest.mark.parametrize("key", INT_KEYS)
@pytest.mark.parametrize("value", NOT_INTEGERS, ids=[repr(v) for v in NOT_INTEGERS])
def test_integer_keys_refuse_booleans_strings_fractions(key, value):
    msg = refused({key: value}, topic="t1")
    assert_names(msg, "t1", key, value, r"integer")


@pytest.mark.parametrize(
    "value", [True, False, "0.5", None, [0.5], math.nan], ids=["True", "False", "str", "None", "list", "nan"]
)
def test_ratio_must_be_a_number(value):
    msg = refused({"min.cleanable.dirty.ratio": value}, topic="t2")
    assert_names(msg, "t2", "min.cleanable.dirty.ratio", value, r"number|between 0 and 1")


def test_integer_values_beyond_int64_are_refused():
    msg = refused({"segment.ms": INT64_MAX + 1})
    assert_names(msg, "orders", "segment.ms", INT64_MAX + 1)
    msg = refused({"max.compaction.lag.ms": 2**64})
    assert_names(msg, "orders", "max.compaction.lag.ms", 2**64)


def test_min_lag_above_max_lag_is_a_bad_combination():
    msg = refused({"min.compaction.lag.ms": 5001, "max.compaction.lag.ms": 5000}, topic="combo")
    assert "combo" in msg and "min.compaction.lag.ms" in msg and "5001" in msg
    assert "max.compaction.lag.ms" in msg  # the rule names the other key of the combination
    # a min lag within the default (int64 max) max lag is fine
    assert build_config({"min.compaction.lag.ms": 10**15}).min_compaction_lag_ms == 10**15


def test_unknown_key_refused():
    msg = refused({"cleanup.polcy": "compact"}, topic="typo")
    assert "typo" in msg and "cleanup.polcy" in msg and "compact" in msg
    assert re.search(r"unknown", msg, re.I)
    for key in ("log.cleaner.enable", "segment.index.bytes", "retention", ""):
        with pytest.raises(ConfigError):
            build_config({key: 1})


def test_default_topic_name_in_message():
    with pytest.raises(ConfigError) as info:
        build_config({"segment.ms": 0})
    assert "segment.ms" in str(info.value)


# --- first invalid key in table order ------------------------------------------------------------------


def test_first_invalid_key_in_table_order_is_reported():
    bad = {
        "retention.bytes": -7,
        "segment.ms": 0,
        "delete.retention.ms": -3,
        "min.cleanable.dirty.ratio": 3,
        "compaction.strategy": "nope",
    }
    msg = refused(bad)
    assert "min.cleanable.dirty.ratio" in msg
    for other in ("retention.bytes", "segment.ms", "delete.retention.ms", "compaction.strategy"):
        assert other not in msg, msg
    # the same whatever the order of the mapping
    msg2 = refused(dict(reversed(list(bad.items()))))
    assert "min.cleanable.dirty.ratio" in msg2 and "segment.ms" not in msg2


@pytest.mark.parametrize("first", range(len(TABLE_ORDER) - 1))
def test_each_key_wins_over_all_later_invalid_keys(first):
    invalid_value = {
        "cleanup.policy": "purge",
        "min.cleanable.dirty.ratio": 2,
        "min.compaction.lag.ms": -1,
        "max.compaction.lag.ms": 0,
        "delete.retention.ms": -1,
        "segment.bytes": 0,
        "segment.ms": 0,
        "retention.ms": -2,
        "retention.bytes": -2,
        "compaction.strategy": "nope",
        "compaction.strategy.header": "",
    }
    keys = TABLE_ORDER[first:]
    raw = {k: invalid_value[k] for k in reversed(keys)}
    if "compaction.strategy" not in keys:
        raw["compaction.strategy"] = "header"  # makes the blank header invalid
    msg = refused(raw)
    head = TABLE_ORDER[first]
    assert head in msg, (head, msg)
    for later in keys[1:]:
        # the other key names must not be reported (some keys are prefixes of others)
        assert not re.search(rf"(?<![\w.]){re.escape(later)}=", msg), (later, msg)


def test_policy_error_reported_before_ratio_error():
    msg = refused({"min.cleanable.dirty.ratio": 9, "cleanup.policy": ""})
    assert "cleanup.policy" in msg and "min.cleanable.dirty.ratio" not in msg


# --- cleanup.policy parsing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("compact", {"compact"}),
        ("delete", {"delete"}),
        ("compact,delete", {"compact", "delete"}),
        ("delete,compact", {"compact", "delete"}),
        (" compact , delete ", {"compact", "delete"}),
        ("  delete", {"delete"}),
        ("compact ", {"compact"}),
    ],
)
def test_policy_parsing_order_and_spaces(text, expected):
    cfg = build_config({"cleanup.policy": text})
    assert cfg.policy == frozenset(expected)
    assert cfg.compact == ("compact" in expected)
    assert cfg.delete == ("delete" in expected)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "compact,compact",
        "delete, delete",
        "compact,",
        ",delete",
        "compact,,delete",
        "purge",
        "Compact",
        "compact;delete",
        "compact delete",
        "compact,delete,compact",
    ],
)
def test_policy_invalid_forms_refused(text):
    msg = refused({"cleanup.policy": text}, topic="pol")
    assert_names(msg, "pol", "cleanup.policy", text)


@pytest.mark.parametrize("value", [None, 5, True])
def test_policy_non_string_refused(value):
    msg = refused({"cleanup.policy": value}, topic="pol")
    assert "pol" in msg and "cleanup.policy" in msg and str(value) in msg


def test_to_kafka_round_trip():
    raw = {
        "cleanup.policy": "delete, compact",
        "min.cleanable.dirty.ratio": 0.1,
        "min.compaction.lag.ms": 10,
        "max.compaction.lag.ms": 20,
        "delete.retention.ms": 30,
        "segment.bytes": 40,
        "segment.ms": 50,
        "retention.ms": 60,
        "retention.bytes": 70,
        "compaction.strategy": "header",
        "compaction.strategy.header": "version",
    }
    cfg = build_config(raw)
    back = cfg.to_kafka()
    assert build_config(back) == cfg
    assert back["cleanup.policy"] in ("compact,delete", "delete,compact")


# --- header strategy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "header", [None, "", "   ", "\t", 5, b"version"], ids=["missing", "empty", "spaces", "tab", "int", "bytes"]
)
def test_header_strategy_requires_non_blank_header(header):
    raw = {"compaction.strategy": "header"}
    if header is not None:
        raw["compaction.strategy.header"] = header
    msg = refused(raw, topic="hdr")
    assert "hdr" in msg and "compaction.strategy.header" in msg
    assert re.search(r"required|non-blank|blank", msg), msg


def test_header_strategy_keeps_header_and_other_strategies_ignore_it():
    cfg = build_config({"compaction.strategy": "header", "compaction.strategy.header": "Version"})
    assert cfg.strategy == "header" and cfg.strategy_header == "Version"
    for strategy in ("offset", "timestamp"):
        cfg = build_config({"compaction.strategy": strategy, "compaction.strategy.header": "whatever"})
        assert cfg.strategy == strategy and cfg.strategy_header is None
        # ignored means even a blank value is accepted
        assert build_config({"compaction.strategy": strategy, "compaction.strategy.header": ""}).strategy == strategy


def test_valid_unused_keys_are_accepted_and_ignored():
    # retention keys with a compact-only policy, lag keys with a delete-only policy
    cfg = build_config({"cleanup.policy": "compact", "retention.ms": 5, "retention.bytes": 10})
    assert cfg.policy == frozenset({"compact"}) and not cfg.delete
    cfg = build_config({"cleanup.policy": "delete", "max.compaction.lag.ms": 1000, "min.cleanable.dirty.ratio": 0.9})
    assert not cfg.compact
    # roll interval of a topic without compact ignores max.compaction.lag.ms (SPEC §1)
    assert cfg.roll_interval_ms == cfg.segment_ms
    cfg = build_config({"max.compaction.lag.ms": 1000})
    assert cfg.roll_interval_ms == 1000
    cfg = build_config({"max.compaction.lag.ms": 10**13, "segment.ms": 7})
    assert cfg.roll_interval_ms == 7


def test_invalid_value_refused_even_if_unused_by_policy():
    # "valid but unused" keys are ignored; an invalid one is still refused
    msg = refused({"cleanup.policy": "compact", "retention.ms": -3}, topic="c")
    assert_names(msg, "c", "retention.ms", -3)


# --- topics file ---------------------------------------------------------------------------------------


def write(tmp_path, text, name="topics.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_topics_file_defaults_and_overrides(tmp_path):
    path = write(
        tmp_path,
        """
defaults:
  min.cleanable.dirty.ratio: 0.2
  segment.bytes: 4096
  cleanup.policy: compact
topics:
  users:
    segment.bytes: 1024
    compaction.strategy: timestamp
  audit.log_v2:
    cleanup.policy: "compact, delete"
    retention.ms: 1000
  plain:
""",
    )
    tf = load_topics(path)
    users = tf.config_for("users")
    assert users.segment_bytes == 1024  # override
    assert users.min_cleanable_dirty_ratio == 0.2  # from defaults
    assert users.strategy == "timestamp"
    audit = tf.config_for("audit.log_v2")
    assert audit.policy == frozenset({"compact", "delete"}) and audit.retention_ms == 1000
    assert audit.segment_bytes == 4096
    plain = tf.config_for("plain")  # listed without overrides
    assert plain.segment_bytes == 4096 and plain.min_cleanable_dirty_ratio == 0.2
    other = tf.config_for("not-listed")  # a topic not listed takes the defaults
    assert other.segment_bytes == 4096 and other.strategy == "offset"
    assert other.segment_ms == DEFAULTS["segment.ms"]


def test_topics_file_none_and_empty_mean_defaults(tmp_path):
    assert load_topics(None).config_for("x") == build_config({})
    assert load_topics(write(tmp_path, "")).config_for("x") == build_config({})
    assert load_topics(write(tmp_path, "defaults:\ntopics:\n", "b.yaml")).config_for("y") == build_config({})
    assert parse_topics(None).config_for("z") == build_config({})


def test_topics_file_invalid_override_names_topic_key_value(tmp_path):
    path = write(tmp_path, "topics:\n  users:\n    segment.ms: -4\n")
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    msg = str(info.value)
    assert "users" in msg and "segment.ms" in msg and "-4" in msg and re.search(r">= ?1", msg)


def test_topics_file_invalid_default_refused(tmp_path):
    path = write(tmp_path, "defaults:\n  delete.retention.ms: abc\ntopics:\n  users: {}\n")
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    msg = str(info.value)
    assert "delete.retention.ms" in msg and "abc" in msg and "integer" in msg


def test_topics_file_combination_of_default_and_override(tmp_path):
    # the default max lag is below the topic's min lag: refused for that topic
    path = write(tmp_path, "defaults:\n  max.compaction.lag.ms: 100\ntopics:\n  t:\n    min.compaction.lag.ms: 200\n")
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    assert "'t'" in str(info.value) and "min.compaction.lag.ms" in str(info.value)


def test_topics_file_yaml_booleans_and_strings_refused(tmp_path):
    # YAML turns `yes` into a boolean and "100" (quoted) into a string: both refused for integer keys
    with pytest.raises(ConfigError, match="segment.bytes"):
        load_topics(write(tmp_path, "topics:\n  a:\n    segment.bytes: yes\n"))
    with pytest.raises(ConfigError, match="segment.ms"):
        load_topics(write(tmp_path, "topics:\n  a:\n    segment.ms: '100'\n", "q.yaml"))
    with pytest.raises(ConfigError, match="retention.ms"):
        load_topics(write(tmp_path, "topics:\n  a:\n    retention.ms: 1.5\n", "f.yaml"))


def test_topics_file_unknown_key_refused(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_topics(write(tmp_path, "topics:\n  users:\n    segment.byte: 100\n"))
    assert "users" in str(info.value) and "segment.byte" in str(info.value)


def test_topics_file_invalid_yaml(tmp_path):
    path = write(tmp_path, "topics:\n  users: {segment.bytes: [1, 2\n  - oops: :\n")
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    msg = str(info.value)
    assert str(path) in msg and re.search(r"YAML", msg)


def test_topics_file_missing(tmp_path):
    path = tmp_path / "nope" / "topics.yaml"
    with pytest.raises(ConfigError) as info:
        load_topics(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "name", ["../x", "a/b", "..", ".", "", "x" * 250, "bad name", "ünïcode", "topic*", "../../etc/passwd"]
)
def test_topics_file_bad_topic_names_refused(tmp_path, name):
    with pytest.raises(CompactionError) as info:
        parse_topics({"topics": {name: {"segment.ms": 10}}})
    assert repr(name) in str(info.value) or name in str(info.value)
    # the same through a YAML file
    import yaml

    path = write(tmp_path, yaml.safe_dump({"topics": {name: {"segment.ms": 10}}}))
    with pytest.raises(CompactionError):
        load_topics(path)


def test_topics_file_longest_valid_topic_name():
    name = "t" * 249
    assert parse_topics({"topics": {name: {"segment.ms": 10}}}).config_for(name).segment_ms == 10


def test_topics_file_numeric_topic_name(tmp_path):
    # "2024" is a valid Kafka topic name (digits only); YAML reads an unquoted 2024 as an integer,
    # but the file means the topic "2024" and must not refuse it as an invalid name.
    tf = load_topics(write(tmp_path, "topics:\n  2024:\n    segment.ms: 10\n"))
    assert tf.config_for("2024").segment_ms == 10
    tf = load_topics(write(tmp_path, "topics:\n  '2025':\n    segment.ms: 11\n", "q.yaml"))
    assert tf.config_for("2025").segment_ms == 11


@pytest.mark.parametrize(
    "data",
    [[1, 2], "text", 5, {"defaults": [1]}, {"topics": ["users"]}, {"topics": {"users": "compact"}}, {"topic": {}}],
)
def test_topics_file_bad_structure_refused(data):
    with pytest.raises(ConfigError):
        parse_topics(data)


def test_topics_file_unknown_section_named(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_topics(write(tmp_path, "defaults: {}\noverrides: {}\n"))
    assert "overrides" in str(info.value)


def test_a_topic_without_landing_keys_takes_the_native_landing_as_it_is():
    """No landing or cdc key (or each at its default): the one native landing, nothing built or shown for
    it; any other value is validated and shown as before."""
    for raw in (
        {},
        {"landing.format": "native", "cdc.format": "none"},
        {"compaction.strategy": "header", "compaction.strategy.header": "v"},
    ):
        config = build_config(raw, "t")
        assert config.landing is NATIVE_LANDING, raw
        assert not any(key.startswith(("landing.", "cdc.")) for key in config.to_kafka()), raw
    aiven = build_config({"landing.format": "aiven"}, "t")
    assert aiven.landing.format is LandingFormat.AIVEN and aiven.to_kafka()["landing.format"] == "aiven"
    with pytest.raises(ConfigError, match="landing.format"):
        build_config({"landing.format": "kafka"}, "t")
