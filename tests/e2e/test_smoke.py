from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.state.latest_state import latest_state_df
from compaction_assets.topics.config import build_config


def test_append_clean_read(store, spark):
    cfg = build_config({})
    log = store.log("users-0")
    writer.append(
        log,
        cfg,
        [
            {"key": "a", "value": "1", "timestamp": 1},
            {"key": "a", "value": "2", "timestamp": 2},
            {"key": "b", "value": None, "timestamp": 3},
        ],
    )
    writer.roll(log)
    report = engine.run(log, cfg, 1000, spark=spark)
    assert report.cleaned and report.stats.records_written == 2
    assert [r.offset for r in iter_records(log)] == [1, 2]
    state = {r["key"]: r["value"] for r in latest_state_df(spark, log, cfg).collect()}
    assert state == {b"a": b"2"}


def test_append_from_spark_dataframe_matches_arrow_append(store, spark, tmp_path):
    from compaction_assets.log.spark_append import append_spark
    from compaction_assets.log.writer import append
    from compaction_assets.store.log_store import LogStore

    cfg = build_config({"segment.bytes": 60})
    rows = [(f"k{i % 3}", None if i == 4 else f"v{i}", 100 + i, [("h", b"x")] if i % 2 else []) for i in range(8)]
    df = spark.createDataFrame(
        rows, "key string, value string, timestamp long, headers array<struct<name:string,value:binary>>"
    )
    a = store.log("a-0")
    append_spark(a, cfg, df)
    b = LogStore(str(tmp_path / "other")).log("a-0")
    append(b, cfg, [{"key": k, "value": v, "timestamp": t, "headers": h} for k, v, t, h in rows])
    ma, mb = a.manifest(), b.manifest()
    assert [
        (s.base_offset, s.next_offset, s.records, s.size, s.min_ts, s.max_ts, s.first_ts, s.tombstones)
        for s in ma.segments
    ] == [
        (s.base_offset, s.next_offset, s.records, s.size, s.min_ts, s.max_ts, s.first_ts, s.tombstones)
        for s in mb.segments
    ]
    assert len(ma.segments) > 2
    assert [(r.offset, r.key, r.value, r.headers) for r in iter_records(a)] == [
        (r.offset, r.key, r.value, r.headers) for r in iter_records(b)
    ]
