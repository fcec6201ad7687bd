from compaction_assets import engine, log_ops
from compaction_assets.config import build_config
from compaction_assets.reader import iter_records, latest_state_df


def test_append_clean_read(store, spark):
    cfg = build_config({})
    log = store.log("users-0")
    log_ops.append(log, cfg, [{"key": "a", "value": "1", "timestamp": 1},
                              {"key": "a", "value": "2", "timestamp": 2},
                              {"key": "b", "value": None, "timestamp": 3}])
    log_ops.roll(log)
    report = engine.run(log, cfg, 1000, spark=spark)
    assert report.cleaned and report.stats["records_written"] == 2
    assert [r.offset for r in iter_records(log)] == [1, 2]
    state = {r["key"]: r["value"] for r in latest_state_df(spark, log, cfg).collect()}
    assert state == {b"a": b"2"}
