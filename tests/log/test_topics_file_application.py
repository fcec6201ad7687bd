"""A topics file is an input: `config apply` (or the demo, or the Dagster job) stores it when asked, and a
deployment's file (COMPACTION_TOPICS) is stored when its content changes; between changes the stored
configuration, `config set` included, is what runs, and a file that cannot be applied never stops work."""

from __future__ import annotations

import pytest

from compaction_assets.errors import ConfigError
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.applied_file import AppliedFiles, apply_topics_file, apply_when_changed
from compaction_assets.topics.config import build_config
from compaction_assets.topics.config_store import DEFAULTS_ENTRY, ConfigStore, cleaned_logs_of


@pytest.fixture
def store(tmp_path) -> LogStore:
    return LogStore(str(tmp_path / "store"))


def deploy(store: LogStore, path, now: int = 1):
    """What a process with COMPACTION_TOPICS=path does before it reads a topic's configuration."""
    return apply_when_changed(
        ConfigStore(store.storage), str(path), "COMPACTION_TOPICS", now, lambda: [], cleaned_logs_of(store)
    )


def test_a_deployments_file_is_stored_once_and_a_later_config_set_is_what_runs(store, tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("defaults: {min.cleanable.dirty.ratio: 0.3}\ntopics:\n  orders: {segment.ms: 120000}\n")
    configs = ConfigStore(store.storage)
    first = deploy(store, path)
    assert first.applied and {c.topic for c in first.changes} == {"orders"}
    assert configs.current(DEFAULTS_ENTRY) is not None and configs.config_for("orders").segment_ms == 120000
    assert configs.config_for("other").min_cleanable_dirty_ratio == 0.3  # the file's defaults are stored too
    configs.set_topic("orders", {"min.cleanable.dirty.ratio": 0.9}, "config set", 2)
    again = deploy(store, path, 3)
    assert not again.applied and again.refusal is None
    assert configs.config_for("orders").min_cleanable_dirty_ratio == 0.9  # the file does not undo the set
    assert configs.versions("orders") == [1, 2]
    # an edited file is a new input: it is stored (and its own keys win)
    path.write_text("defaults: {min.cleanable.dirty.ratio: 0.3}\ntopics:\n  orders: {segment.ms: 60000}\n")
    edited = deploy(store, path, 4)
    assert edited.applied and configs.config_for("orders").segment_ms == 60000
    assert [a.path for a in AppliedFiles(configs).all()] == [str(path)]


def test_a_comment_in_the_file_is_not_a_change(store, tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("topics:\n  orders: {segment.ms: 120000}\n")
    assert deploy(store, path).applied
    ConfigStore(store.storage).set_topic("orders", {"segment.ms": 5000}, "config set", 2)
    path.write_text("# the orders topic\ntopics:\n  orders: {segment.ms: 120000}  # two minutes\n")
    assert not deploy(store, path, 3).applied
    assert ConfigStore(store.storage).config_for("orders").segment_ms == 5000


def test_a_file_that_cannot_be_applied_is_reported_and_the_stored_configuration_runs(store, tmp_path):
    configs = ConfigStore(store.storage)
    handle = store.log("orders-0")
    writer.append(handle, build_config({}), [{"key": "a", "value": "1", "timestamp": 1}])
    writer.set_checkpoint(handle, 1)  # as a cleaning leaves it: the log counts as cleaned
    path = tmp_path / "topics.yaml"
    path.write_text("topics:\n  orders: {compaction.strategy: timestamp}\n")
    result = deploy(store, path)
    assert not result.applied and "--confirm" in (result.refusal or "")
    assert configs.versions("orders") == [] and configs.config_for("orders").strategy == "offset"
    assert AppliedFiles(configs).all() == []  # not recorded: the next process says it again


def test_an_explicit_apply_is_recorded_so_the_deployment_does_not_apply_it_again(store, tmp_path):
    path = tmp_path / "topics.yaml"
    path.write_text("topics:\n  orders: {segment.ms: 120000}\n")
    configs = ConfigStore(store.storage)
    changes = apply_topics_file(configs, str(path), "config apply", 1, [], cleaned_logs_of(store))
    assert [c.topic for c in changes] == ["orders"]
    configs.set_topic("orders", {"segment.ms": 5000}, "config set", 2)
    assert not deploy(store, path, 3).applied and configs.config_for("orders").segment_ms == 5000
    # an explicit apply of the same file applies it again (it is asked for)
    apply_topics_file(configs, str(path), "config apply", 4, [], cleaned_logs_of(store))
    assert configs.config_for("orders").segment_ms == 120000


def test_a_missing_or_invalid_file_is_one_line(store, tmp_path):
    configs = ConfigStore(store.storage)
    with pytest.raises(ConfigError, match="cannot read topics file"):
        apply_topics_file(configs, str(tmp_path / "nope.yaml"), "config apply", 1, [], cleaned_logs_of(store))
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics:\n  orders: {segment.ms: -1}\n")
    result = deploy(store, bad)
    assert not result.applied and "segment.ms" in (result.refusal or "") and configs.versions("orders") == []
