"""The topic configuration stored with the store (`<store>/_topics/<topic>/v<N>.json`)."""

from __future__ import annotations

import json

import pytest

from compaction_assets.errors import ConfigError
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import parse_topics
from compaction_assets.topics.config_store import ConfigSource, ConfigStore, parse_setting


@pytest.fixture
def configs(tmp_path) -> ConfigStore:
    return ConfigStore(LogStore(str(tmp_path / "store")).storage)


def test_nothing_stored_means_the_built_in_defaults(configs):
    assert configs.current("orders") is None and configs.config_for("orders").strategy == "offset"
    assert configs.describe("orders").source == ConfigSource.BUILT_IN


def test_each_change_is_a_new_version_with_time_and_source(configs, tmp_path):
    configs.set_topic("orders", {"min.cleanable.dirty.ratio": 0.2}, "first", 1000)
    configs.set_topic("orders", {"segment.bytes": 100}, "second", 2000)
    history = configs.history("orders")
    assert [(h.version, h.source, h.changed_ms) for h in history] == [(1, "first", 1000), (2, "second", 2000)]
    cfg = configs.config_for("orders")
    assert (cfg.min_cleanable_dirty_ratio, cfg.segment_bytes) == (0.2, 100)  # the second keeps the first's keys
    on_disk = json.loads((tmp_path / "store" / "_topics" / "orders" / "v2.json").read_text())
    assert on_disk["settings"]["segment.bytes"] == 100 and on_disk["source"] == "second"


def test_an_invalid_change_is_refused_and_stores_nothing(configs):
    with pytest.raises(ConfigError, match="min.cleanable.dirty.ratio"):
        configs.set_topic("orders", {"min.cleanable.dirty.ratio": 2}, "bad", 1)
    assert configs.versions("orders") == []


def test_applied_defaults_reach_topics_without_their_own(configs):
    topics = parse_topics({"defaults": {"delete.retention.ms": 5}, "topics": {"a": {"segment.bytes": 10}}})
    changes = configs.apply(topics, "file", 1, known_topics=["b"])
    assert {c.topic for c in changes} == {"a", "b"}
    assert configs.config_for("b").delete_retention_ms == 5 and configs.config_for("a").segment_bytes == 10
    assert configs.describe("b").source == ConfigSource.STORE_DEFAULTS
    assert configs.apply(topics, "file", 2) == []  # nothing changes the second time


def test_a_set_that_changes_no_effective_value_stores_nothing(configs):
    # 0.5 is the built-in default: the docs say an unchanged `config set` stores nothing
    assert configs.set_topic("orders", {"min.cleanable.dirty.ratio": 0.5}, "config set", 1) is None
    assert configs.versions("orders") == []
    configs.apply(parse_topics({"defaults": {"delete.retention.ms": 5}}), "apply", 2)
    # equal to the store's defaults: nothing pins the topic to them either
    assert configs.set_topic("orders", {"delete.retention.ms": 5}, "config set", 3) is None
    assert configs.versions("orders") == [] and configs.describe("orders").source == ConfigSource.STORE_DEFAULTS
    stored = configs.set_topic("orders", {"delete.retention.ms": 6}, "config set", 4)
    assert stored is not None and stored.version == 1
    assert configs.set_topic("orders", {"delete.retention.ms": 6}, "config set", 5) is None
    assert configs.versions("orders") == [1]


def test_a_change_shows_default_values_as_they_are_not_as_null(configs):
    change = configs.plan_set("cdc", {"landing.format": "confluent", "table.freshness.ms": 5000})
    assert change.changed == {"landing.format": ["native", "confluent"], "table.freshness.ms": [60000, 5000]}
    topics = parse_topics({"topics": {"cdc": {"landing.format": "confluent"}}})
    (applied,) = configs.apply(topics, "apply", 1)
    assert applied.changed == {"landing.format": ["native", "confluent"]}


def test_the_stored_configuration_is_what_runs(configs):
    configs.set_topic("x", {"delete.retention.ms": 7}, "config set", 1)
    assert configs.config_for("x").delete_retention_ms == 7


def test_parse_setting_reads_yaml_values_and_refuses_unknown_keys():
    assert parse_setting("min.cleanable.dirty.ratio=0.5") == ("min.cleanable.dirty.ratio", 0.5)
    assert parse_setting("compaction.strategy=header") == ("compaction.strategy", "header")
    with pytest.raises(ConfigError, match="unknown configuration key"):
        parse_setting("nope=1")
    with pytest.raises(ConfigError, match="key=value"):
        parse_setting("segment.bytes")
