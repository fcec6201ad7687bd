"""The checks pass on real cleanings (the scenario of a false failure included) and fail, naming
examples, on every kind of wrong cleaning: each test feeds a check a log as a wrong cleaning would
have committed it."""

import pytest

from compaction_assets.checks import specs
from compaction_assets.checks.verify import verify_cleaning
from compaction_assets.cleaning import engine
from compaction_assets.conformance import CaseRun
from compaction_assets.log import writer
from compaction_assets.topics.config import build_config
from tests.corrupt import rewrite_below

NOW = 10_000
T0 = 1_700_000_000_000
HOUR = 3_600_000
DAY = 86_400_000


def _cleaned(store, spark, **cfg):
    config = build_config({"delete.retention.ms": 1000, **cfg})
    log = store.log("checks-0")
    writer.append(
        log,
        config,
        [
            {"key": "a", "value": "1", "timestamp": 100},
            {"key": "b", "value": "1", "timestamp": 110},
            {"key": "a", "value": "2", "timestamp": 120},
            {"key": "c", "value": None, "timestamp": 130},
            {"key": "b", "value": "2", "timestamp": 140},
            {"key": "d", "value": "1", "timestamp": 150},
        ],
    )
    writer.roll(log)
    writer.append(log, config, [{"key": "e", "value": "1", "timestamp": 160}])
    rep = engine.run(log, config, NOW, spark=spark)
    assert rep.cleaned
    return log, config, rep


def _check(name, log, config, rep, after=None, now=NOW, cleaned=True):
    before = log.manifest_version(rep.before_version)
    after = after or log.manifest()
    [outcome] = verify_cleaning(log, config, before, after, now, cleaned, (name,))
    return outcome


def _failed(outcome, count_key):
    assert not outcome.passed, outcome
    assert outcome.metadata[count_key] >= 1, outcome.metadata
    assert outcome.metadata[f"examples_{count_key}"], outcome.metadata  # the failure names examples
    return outcome.metadata[f"examples_{count_key}"]


@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_all_checks_pass_on_a_real_cleaning(store, spark, strategy):
    log, config, rep = _cleaned(store, spark, **{"compaction.strategy": strategy, "compaction.strategy.header": "v"})
    before, after = log.manifest_version(rep.before_version), log.manifest_version(rep.after_version)
    outcomes = verify_cleaning(log, config, before, after, NOW, True)
    assert [o.name for o in outcomes] == [s.name for s in specs.CHECK_SPECS]
    assert all(o.passed for o in outcomes), [(o.name, o.description, o.metadata) for o in outcomes if not o.passed]


def _late_tombstone_case(strategy: str) -> dict:
    """The issue's scenario: a late tombstone that loses to a remembered delete (SPEC §6)."""

    def rec(key, value, ts, version):
        r = {"key": key, "value": value, "timestamp": ts}
        if strategy == "header":
            r["headers"] = [["v", version]]
        return r

    return {
        "name": f"late-tombstone-{strategy}",
        "config": {
            "compaction.strategy": strategy,
            "compaction.strategy.header": "v",
            "delete.retention.ms": DAY,
            "segment.ms": HOUR,
        },
        "steps": [
            {
                "append": [
                    rec("k1", "v1", T0, 1),
                    rec("k1", None, T0 + 10, 3),
                    rec("k2", "v2", T0 + 20, 1),
                    rec("k3", "v3", T0 + 2 * HOUR, 1),
                ]
            },
            {"clean": {"now": T0 + 3 * HOUR, "force": True}},
            {"clean": {"now": T0 + 3 * HOUR + DAY + 1, "force": True}},
            {"append": [rec("k1", None, T0 + 5, 2), rec("k4", "v4", T0 + 5 * HOUR, 1)]},
            {"clean": {"now": T0 + 5 * HOUR + DAY + 1, "force": True}},
        ],
    }


@pytest.mark.parametrize("strategy", ["timestamp", "header"])
def test_a_late_tombstone_lost_to_a_remembered_delete_passes_every_check(spark, tmp_path, strategy):
    result = CaseRun(_late_tombstone_case(strategy), spark, str(tmp_path / "case"), checks=True).run()
    assert result["error"] is None
    # the cleaning is right: the expired delete was remembered, the late tombstone removed
    assert [s["stats"]["tombstones_removed"] for s in result["steps"]] == [0, 1, 0]
    assert result["steps"][2]["stats"]["records_read"] - result["steps"][2]["stats"]["records_written"] == 1
    assert all(r["key"] != "k1" for s in result["log"]["segments"] for r in s["records"])
    assert result["latest_state"] == {"k2": "v2", "k3": "v3", "k4": "v4"}
    # and so are the checks, after every clean step
    assert len(result["checks"]) == 3 * len(specs.CHECK_SPECS)
    assert [c for c in result["checks"] if not c["passed"]] == []


# --- latest_value_per_key ------------------------------------------------------------------------


def test_latest_value_per_key_fails_when_a_superseded_record_survives(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(
        log,
        6,
        lambda rows: (
            rows + [{"offset": 0, "key": b"a", "value": b"1", "timestamp": 100, "headers": [], "delete_horizon": None}]
        ),
    )
    examples = _failed(_check(specs.LATEST_VALUE_PER_KEY, log, config, rep), "records_not_the_winner")
    assert examples[0] == {"key": "a", "offset": 0, "winner_offset": 2}


def test_latest_value_per_key_fails_when_a_winner_is_lost(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [r for r in rows if r["key"] != b"d"])
    examples = _failed(_check(specs.LATEST_VALUE_PER_KEY, log, config, rep), "winning_values_missing")
    assert examples[0]["key"] == "d" and examples[0]["offset"] == 5


# --- tombstone_retention -------------------------------------------------------------------------


def test_tombstone_retention_fails_when_a_tombstone_goes_before_its_horizon(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [r for r in rows if r["value"] is not None])
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep), "removed_before_horizon")
    assert examples[0]["key"] == "c" and examples[0]["delete_horizon"] == NOW + 1000


def test_tombstone_retention_fails_on_a_wrong_horizon(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [dict(r, delete_horizon=NOW) if r["value"] is None else r for r in rows])
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep), "wrong_horizon")
    assert examples[0]["expected"] == NOW + 1000


def test_tombstone_retention_fails_when_an_expired_tombstone_is_kept(store, spark):
    log, config, _ = _cleaned(store, spark)
    later = NOW + 5000  # past the horizon NOW + 1000: the next cleaning must remove it
    rep = engine.run(log, config, later, spark=spark, force=True)
    assert rep.cleaned and rep.stats.tombstones_removed == 1
    assert _check(specs.TOMBSTONE_RETENTION, log, config, rep, now=later).passed
    rewrite_below(
        log,
        7,
        lambda rows: (
            rows
            + [{"offset": 3, "key": b"c", "value": None, "timestamp": 130, "headers": [], "delete_horizon": NOW + 1000}]
        ),
    )
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep, now=later), "kept_after_horizon")
    assert examples[0]["key"] == "c"


def test_tombstone_retention_fails_when_a_held_tombstone_is_removed(store, spark):
    log, config, _ = _cleaned(store, spark, **{"compaction.strategy": "timestamp"})
    writer.append(log, config, [{"key": "c", "value": "late", "timestamp": 50}])  # loses to the delete
    later = NOW + 5000
    rep = engine.run(log, config, later, spark=spark, force=True)
    outcome = _check(specs.TOMBSTONE_RETENTION, log, config, rep, now=later)
    assert outcome.passed and outcome.metadata["held"] == 1, outcome  # held while the late record is uncleaned
    rewrite_below(log, 6, lambda rows: [r for r in rows if r["key"] != b"c"])
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep, now=later), "removed_while_held")
    assert examples[0]["key"] == "c"


def test_tombstone_retention_fails_when_a_deleted_key_comes_back(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [dict(r, value=b"zombie") if r["key"] == b"c" else r for r in rows])
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep), "deleted_keys_brought_back")
    assert examples[0]["key"] == "c" and examples[0]["value"] == "zombie"


def test_tombstone_retention_fails_when_a_removed_delete_is_not_remembered(store, spark):
    log, config, _ = _cleaned(store, spark, **{"compaction.strategy": "timestamp"})
    later = NOW + 5000
    rep = engine.run(log, config, later, spark=spark, force=True)
    assert rep.stats.tombstones_removed == 1 and log.manifest().remembered
    log.update(lambda m: m.with_(remembered=None))  # a late write of c would now come back
    examples = _failed(_check(specs.TOMBSTONE_RETENTION, log, config, rep, now=later), "deletes_not_remembered")
    assert examples[0] == {"key": "c", "offset": 3, "until": later + 1000}


# --- offsets_and_order_preserved -----------------------------------------------------------------


def test_offsets_and_order_fail_on_an_altered_offset(store, spark):
    log, config, rep = _cleaned(store, spark)
    rewrite_below(log, 6, lambda rows: [dict(r, offset=r["offset"] + 100) if r["key"] == b"d" else r for r in rows])
    outcome = _check(specs.OFFSETS_AND_ORDER_PRESERVED, log, config, rep)
    assert _failed(outcome, "records_not_in_input")[0]["offset"] == 105
    assert _failed(outcome, "records_outside_segment")[0]["segment"] == [0, 6]


def test_offsets_and_order_fail_when_a_record_moves(store, spark):
    log, config, rep = _cleaned(store, spark)
    # d's value appears under b's offset: the same offsets, a record that was never there
    rewrite_below(log, 6, lambda rows: [dict(r, key=b"d") if r["offset"] == 4 else r for r in rows])
    examples = _failed(_check(specs.OFFSETS_AND_ORDER_PRESERVED, log, config, rep), "records_not_in_input")
    assert examples[0]["offset"] == 4


def test_offsets_and_order_fail_when_the_uncleaned_head_changes(store, spark):
    log, config, rep = _cleaned(store, spark)
    log.update(
        lambda cur: cur.with_(
            segments=cur.segments[:-1] + (cur.segments[-1].__class__(**{**cur.segments[-1].__dict__, "files": ()}),)
        )
    )  # the active segment's record vanishes
    examples = _failed(
        _check(specs.OFFSETS_AND_ORDER_PRESERVED, log, config, rep), "records_changed_above_first_uncleanable"
    )
    assert examples[0]["key"] == "e" and examples[0]["offset"] == 6


def test_offsets_and_order_fail_on_a_wrong_segment_layout(store, spark):
    log, config, rep = _cleaned(store, spark)
    m = log.manifest()
    first = m.segments[0]
    split = (
        first.__class__(**{**first.__dict__, "next_offset": 3, "id": "x1"}),
        first.__class__(**{**first.__dict__, "base_offset": 3, "files": (), "records": 0, "id": "x2"}),
    )
    log.update(lambda cur: cur.with_(segments=split + cur.segments[1:]))  # not merged as SPEC §6 says
    outcome = _check(specs.OFFSETS_AND_ORDER_PRESERVED, log, config, rep)
    assert _failed(outcome, "wrong_segment_layout")[0]["expected"] == [[0, 6]]
    assert outcome.metadata["records_outside_segment"] >= 1


# --- max_compaction_delay ------------------------------------------------------------------------


def test_max_compaction_delay_warns_when_a_dirty_record_is_left_past_its_deadline(store, spark):
    config = build_config({"max.compaction.lag.ms": 1000})
    log = store.log("late-0")
    writer.append(
        log, config, [{"key": "a", "value": "1", "timestamp": 100}, {"key": "a", "value": "2", "timestamp": 200}]
    )
    writer.roll(log)
    m = log.manifest()  # a run that did not clean a log whose records are 5 s past their deadline
    [outcome] = verify_cleaning(log, config, m, m, 6000, False, (specs.MAX_COMPACTION_DELAY,))
    assert _failed(outcome, "dirty_records_over_deadline")[0] == {
        "key": "a",
        "offset": 0,
        "timestamp": 100,
        "waited_ms": 5900,
    }
    assert outcome.metadata["max_compaction_delay_ms"] == 6000 - 1000 - 100
    rep = engine.run(log, config, 6000, spark=spark)  # the cleaning that was due
    assert rep.cleaned and _check(specs.MAX_COMPACTION_DELAY, log, config, rep, now=6000).passed


def test_max_compaction_delay_warns_when_the_active_segment_misses_its_deadline_roll(store, spark):
    config = build_config({"max.compaction.lag.ms": 1000})
    log = store.log("idle-0")
    writer.append(log, config, [{"key": "a", "value": "1", "timestamp": 100}])
    m = log.manifest()  # never sealed: nothing was ever cleanable
    [outcome] = verify_cleaning(log, config, m, m, 6000, False, (specs.MAX_COMPACTION_DELAY,))
    assert _failed(outcome, "active_segment_past_deadline")[0]["offset"] == 0
