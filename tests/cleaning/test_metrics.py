"""Every SPEC §8 figure, per cleaning and across logs, on small logs whose figures are known by hand."""

import pytest

from compaction_assets.cleaning import engine, metrics
from compaction_assets.errors import CompactionError
from compaction_assets.log import writer
from compaction_assets.topics.config import build_config

NOW = 10_000


def _size(key: str, value: str | None) -> int:
    return 16 + len(key) + len(value or "")  # SPEC §4, no headers


def test_figures_of_one_cleaning(store, spark):
    config = build_config({"delete.retention.ms": 1000})
    log = store.log("m-0")
    writer.append(
        log,
        config,
        [
            {"key": "a", "value": "1", "timestamp": 100},
            {"key": "a", "value": "2", "timestamp": 110},
            {"key": "b", "value": None, "timestamp": 120},
            {"key": "c", "value": "1", "timestamp": 130},
        ],
    )
    writer.roll(log)
    writer.append(log, config, [{"key": "d", "value": "1", "timestamp": 140}])
    rep = engine.run(log, config, NOW, spark=spark)
    s = rep.stats
    read = 2 * _size("a", "1") + _size("b", None) + _size("c", "1")
    written = _size("a", "2") + _size("b", None) + _size("c", "1")
    assert (rep.evaluation.first_dirty_offset, rep.evaluation.first_uncleanable_offset) == (0, 4)
    assert rep.evaluation.dirty_ratio == 1.0 and rep.reason == "dirty_ratio"
    assert (s.records_read, s.records_written, s.tombstones_stamped, s.tombstones_removed) == (4, 3, 1, 0)
    assert s.records_superseded == 1 == s.records_read - s.records_written - s.tombstones_removed
    assert (s.bytes_read, s.bytes_written) == (read, written)
    assert s.cleaner_recopy_percent == pytest.approx(100 * written / read)
    assert s.clean_time_secs > 0

    later = engine.run(log, config, NOW + 5000, spark=spark, force=True)  # the tombstone's horizon passed
    s = later.stats
    assert (s.records_read, s.records_written, s.tombstones_stamped, s.tombstones_removed) == (3, 2, 0, 1)
    assert s.records_superseded == 0 and later.reason == "delete_horizon"  # eligible by itself


def test_figures_across_logs(store, spark):
    configs = {"m": build_config({}), "n": build_config({}), "p": build_config({"max.compaction.lag.ms": 1000})}

    def config_for(name):
        return configs[name.split("-")[0]]

    assert metrics.figures(metrics.evaluate_logs(store, config_for, NOW)).time_since_last_run_ms == -1
    for name in ("m-0", "n-0", "p-0"):
        writer.append(
            store.log(name),
            config_for(name),
            [{"key": "a", "value": "1", "timestamp": 100}, {"key": "a", "value": "2", "timestamp": 200}],
        )
        writer.roll(store.log(name))
    rep = engine.run(store.log("m-0"), config_for("m-0"), NOW, spark=spark)  # m-0 cleaned: ratio 0 after
    engine.mark_uncleanable(store.log("n-0"), CompactionError("segment data/x.parquet is missing"))
    states = metrics.evaluate_logs(store, config_for, NOW)
    finished = store.log("m-0").manifest().last_cleaning.finished_ms
    figs = metrics.figures(states, now=finished + 1234).as_dict()  # by Kafka's metric names, as the CLI prints
    assert figs["logs"] == 3
    assert figs[metrics.MAX_DIRTY_PERCENT] == 100.0  # p-0, all dirty (n-0 is uncleanable)
    assert figs[metrics.MAX_COMPACTION_DELAY_SECS] == (NOW - 1000 - 100) / 1000  # p-0's oldest record
    assert figs[metrics.MAX_CLEAN_TIME_SECS] == pytest.approx(rep.stats.clean_time_secs)
    assert figs[metrics.UNCLEANABLE_PARTITIONS_COUNT] == 1
    assert figs[metrics.UNCLEANABLE_BYTES] == 2 * _size("a", "1")  # n-0's dirty bytes stuck behind the failure
    assert [r["log"] for r in figs[metrics.UNCLEANABLE_LOGS]] == ["n-0"]
    assert "missing" in figs[metrics.UNCLEANABLE_LOGS][0]["error"]
    assert figs[metrics.TIME_SINCE_LAST_RUN_MS] == 1234
