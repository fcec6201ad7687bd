"""The checks' verification functions pass on real cleanings and fail on deliberately corrupted outputs."""

import pytest

from compaction_assets.checks import verify
from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.log.config import build_config
from tests.corrupt import rewrite_below

NOW = 10_000


def _cleaned(store, spark, **cfg):
    config = build_config({"delete.retention.ms": 1000, **cfg})
    log = store.log("checks-0")
    writer.append(log, config, [
        {"key": "a", "value": "1", "timestamp": 100}, {"key": "b", "value": "1", "timestamp": 110},
        {"key": "a", "value": "2", "timestamp": 120}, {"key": "c", "value": None, "timestamp": 130},
        {"key": "b", "value": "2", "timestamp": 140}, {"key": "d", "value": "1", "timestamp": 150}])
    writer.roll(log)
    writer.append(log, config, [{"key": "e", "value": "1", "timestamp": 160}])
    rep = engine.run(log, config, NOW, spark=spark)
    assert rep.cleaned
    return log, config, rep


def _run(name, spark, log, config, rep, after=None, now=NOW):
    before = log.manifest_version(rep.before_version)
    after = after or log.manifest()
    return verify.CHECKS[name](spark, log, config, before, after, rep.evaluation.first_uncleanable_offset, now)


@pytest.mark.parametrize("strategy", ["offset", "timestamp"])
def test_all_checks_pass_on_a_real_cleaning(store, spark, strategy):
    log, config, rep = _cleaned(store, spark, **{"compaction.strategy": strategy})
    for name in verify.CHECKS:
        outcome = _run(name, spark, log, config, rep)
        assert outcome.passed, (name, outcome.description, outcome.metadata)


def test_latest_value_per_key_fails_when_a_superseded_record_survives(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: rows + [{"offset": 0, "key": b"a", "value": b"1", "timestamp": 100,
                                                  "headers": [], "delete_horizon": None}])
    out = _run("latest_value_per_key", spark, log, config, rep)
    assert not out.passed and out.metadata["records_not_the_winner"] == 1


def test_latest_value_per_key_fails_when_a_winner_is_lost(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [r for r in rows if r["key"] != b"d"])
    out = _run("latest_value_per_key", spark, log, config, rep)
    assert not out.passed and out.metadata["winning_values_missing"] == 1


def test_tombstone_retention_fails_when_a_tombstone_goes_before_its_horizon(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [r for r in rows if r["value"] is not None])
    out = _run("tombstone_retention", spark, log, config, rep)
    assert not out.passed and out.metadata["removed_before_horizon"] == 1


def test_tombstone_retention_fails_when_an_expired_tombstone_is_kept(store, spark):
    log, config, rep = _cleaned(store, spark)
    # the stamped horizon is NOW + 1000; judged later, keeping it is wrong (nothing holds it)
    out = _run("tombstone_retention", spark, log, config, rep, now=NOW + 5000)
    assert not out.passed and out.metadata["kept_after_horizon"] == 1


def test_tombstone_retention_fails_when_a_deleted_key_comes_back(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [dict(r, value=b"zombie") if r["key"] == b"c" else r for r in rows])
    out = _run("tombstone_retention", spark, log, config, rep)
    assert not out.passed and out.metadata["deleted_keys_brought_back"] == 1


def test_offsets_and_order_fail_on_an_altered_offset(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [dict(r, offset=r["offset"] + 100) if r["key"] == b"d" else r for r in rows])
    out = _run("offsets_and_order_preserved", spark, log, config, rep)
    assert not out.passed
    assert out.metadata["records_not_in_input"] == 1 and out.metadata["records_outside_segment"] == 1


def test_offsets_and_order_fail_when_the_uncleaned_head_changes(store, spark):
    log, config, rep = _cleaned(store, spark)
    m = log.manifest()
    log.update(lambda cur: cur.with_(segments=cur.segments[:-1] + (cur.segments[-1].__class__(
        **{**cur.segments[-1].__dict__, "files": ()}),)))  # the active segment's record vanishes
    out = _run("offsets_and_order_preserved", spark, log, config, rep)
    assert not out.passed and out.metadata["records_changed_above_first_uncleanable"] == 1
    assert m.active.records == 1


def test_max_compaction_delay_warns_when_dirty_data_waits_too_long(store, spark):
    config = build_config({"max.compaction.lag.ms": 1000, "min.compaction.lag.ms": 900})
    log = store.log("late-0")
    writer.append(log, config, [{"key": "a", "value": "1", "timestamp": 100}])
    writer.roll(log)
    writer.append(log, config, [{"key": "a", "value": "2", "timestamp": 5000}])
    writer.roll(log)
    m = log.manifest()
    out = verify.max_compaction_delay(spark, log, config, m, m, m.checkpoint, 5500)
    assert not out.passed and out.metadata["max_compaction_delay_ms"] == 5500 - 1000 - 100
