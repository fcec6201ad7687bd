"""Performance paths keep the semantics: a fleet cleaned concurrently in one session equals one-by-one
cleanings; the latest state built from the clean section (no group-by there) equals a replay of the log;
the dry run from metadata starts no Spark."""

from __future__ import annotations

import os

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.latest_state import latest_state_df, unique_keys_below
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records

NOW = 10**12


def _fill(handle, cfg, keys: int, rounds: int, seed: int, ts0: int = 1000) -> None:
    for r in range(rounds):
        rows = [{"key": f"k{(k * 7 + seed) % keys:03d}", "value": None if (k + r + seed) % 11 == 0 else f"v{r}-{k}",
                 "timestamp": ts0 + r * keys + k} for k in range(keys)]
        writer.append(handle, cfg, rows)
    writer.roll(handle)


def _replayed_state(handle) -> dict:
    """The latest state by a plain replay of the visible records (offset strategy: last one wins)."""
    state: dict = {}
    for rec in iter_records(handle):
        if rec.value is None:
            state.pop(rec.key, None)
        else:
            state[rec.key] = rec.value
    return state


def _no_spark():
    raise AssertionError("a metadata dry run must not start Spark")


def test_fleet_cleaned_concurrently_equals_one_by_one(spark, store, make_config, tmp_path):
    cfg = make_config(segment_bytes=1500)
    names = [f"fleet-{i}" for i in range(4)]
    for i, name in enumerate(names):
        _fill(store.log(name), cfg, keys=40, rounds=3, seed=i)
    # the same logs in a second store, cleaned one at a time
    from compaction_assets.log.store import LogStore
    other = LogStore(str(tmp_path / "one-by-one"), gc_grace_s=0)
    for i, name in enumerate(names):
        _fill(other.log(name), cfg, keys=40, rounds=3, seed=i)
    # one log is broken: its error is reported and the others are cleaned
    broken = store.log("fleet-9")
    _fill(broken, cfg, keys=40, rounds=2, seed=9)
    os.remove(broken.path(broken.manifest().segments[0].files[0].name))

    results = engine.run_many([(store.log(n), cfg) for n in names + ["fleet-9"]], NOW, spark=spark, force=True,
                              concurrency=3)
    assert [r.log for r in results] == names + ["fleet-9"]
    assert results[-1].error is not None and results[-1].report is None
    for res, name in zip(results, names):
        assert res.error is None and res.report.cleaned
        ref = engine.run(other.log(name), cfg, NOW, spark=spark, force=True)
        assert res.report.stats["records_written"] == ref.stats["records_written"]
        got = [(r.offset, r.key, r.value) for r in iter_records(store.log(name))]
        assert got == [(r.offset, r.key, r.value) for r in iter_records(other.log(name))]


def test_latest_state_from_the_clean_section_equals_a_replay(spark, store, make_config):
    cfg = make_config(segment_bytes=1500)
    log = store.log("state-0")
    _fill(log, cfg, keys=60, rounds=3, seed=1)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    assert unique_keys_below(log.manifest()) is not None
    # a dirty tail: updates, new keys and deletes of keys of the clean section, sealed and active
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": None if k % 5 == 0 else f"tail-{k}",
                              "timestamp": 10**6 + k} for k in range(0, 90, 3)])
    writer.roll(log)
    writer.append(log, cfg, [{"key": "k001", "value": "active", "timestamp": 2 * 10**6}])

    def state():
        return {r["key"]: r["value"] for r in latest_state_df(spark, log, cfg).collect()}

    assert state() == _replayed_state(log)
    # and after a second (incremental) cleaning
    engine.run(log, cfg, NOW, spark=spark, force=True)
    assert state() == _replayed_state(log)


def test_dry_run_from_metadata_starts_no_spark(store, make_config):
    cfg = make_config(segment_bytes=1500)
    log = store.log("plan-0")
    _fill(log, cfg, keys=40, rounds=3, seed=2)
    dry = engine.dry_run(log, cfg, NOW, spark=_no_spark, force=True, detail=False)
    assert dry.would_clean and not dry.detail and dry.segments_in_range > 0
    assert dry.superseded is None and dry.segments_to_rewrite is None
    assert dry.as_dict()["retention"]["segments"] == 0


@pytest.mark.parametrize("detail", [True])
def test_detailed_dry_run_still_counts_superseded_records(spark, store, make_config, detail):
    cfg = make_config(segment_bytes=1500)
    log = store.log("plan-1")
    _fill(log, cfg, keys=40, rounds=3, seed=3)
    dry = engine.dry_run(log, cfg, NOW, spark=spark, force=True, detail=detail)
    assert dry.detail and dry.superseded.records >= 80  # every key was written three times
