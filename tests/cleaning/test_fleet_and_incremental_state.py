"""Performance paths keep the semantics: a fleet cleaned concurrently in one session equals one-by-one
cleanings; the latest state built from the clean section (no group-by there) equals a replay of the log;
the dry run from metadata starts no Spark."""

from __future__ import annotations

import os

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.planning.planner import unique_keys_below
from compaction_assets.state.latest_state import latest_state_df, latest_state_table

NOW = 10**12


def _fill(handle, cfg, keys: int, rounds: int, seed: int, ts0: int = 1000) -> None:
    for r in range(rounds):
        rows = [
            {
                "key": f"k{(k * 7 + seed) % keys:03d}",
                "value": None if (k + r + seed) % 11 == 0 else f"v{r}-{k}",
                "timestamp": ts0 + r * keys + k,
            }
            for k in range(keys)
        ]
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
    from compaction_assets.store.log_store import LogStore

    other = LogStore(str(tmp_path / "one-by-one"), gc_grace_s=0)
    for i, name in enumerate(names):
        _fill(other.log(name), cfg, keys=40, rounds=3, seed=i)
    # one log is broken: its error is reported and the others are cleaned
    broken = store.log("fleet-9")
    _fill(broken, cfg, keys=40, rounds=2, seed=9)
    os.remove(broken.path(broken.manifest().segments[0].files[0].name))

    results = engine.run_many(
        [(store.log(n), cfg) for n in names + ["fleet-9"]], NOW, spark=spark, force=True, concurrency=3
    )
    assert [r.log for r in results] == names + ["fleet-9"]
    assert results[-1].error is not None and results[-1].report is None
    for res, name in zip(results, names):
        assert res.error is None and res.report.cleaned
        ref = engine.run(other.log(name), cfg, NOW, spark=spark, force=True)
        assert res.report.stats.records_written == ref.stats.records_written
        got = [(r.offset, r.key, r.value) for r in iter_records(store.log(name))]
        assert got == [(r.offset, r.key, r.value) for r in iter_records(other.log(name))]


def test_latest_state_from_the_clean_section_equals_a_replay(spark, store, make_config):
    cfg = make_config(segment_bytes=1500)
    log = store.log("state-0")
    _fill(log, cfg, keys=60, rounds=3, seed=1)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    assert unique_keys_below(log.manifest()) is not None
    # a dirty tail: updates, new keys and deletes of keys of the clean section, sealed and active
    writer.append(
        log,
        cfg,
        [
            {"key": f"k{k:03d}", "value": None if k % 5 == 0 else f"tail-{k}", "timestamp": 10**6 + k}
            for k in range(0, 90, 3)
        ],
    )
    writer.roll(log)
    writer.append(log, cfg, [{"key": "k001", "value": "active", "timestamp": 2 * 10**6}])

    def state():
        return {r["key"]: r["value"] for r in latest_state_df(spark, log, cfg).collect()}

    assert state() == _replayed_state(log)
    # and after a second (incremental) cleaning
    engine.run(log, cfg, NOW, spark=spark, force=True)
    assert state() == _replayed_state(log)


def _header(version: int | None) -> list:
    return [] if version is None else [("v", version.to_bytes(8, "big", signed=True))]


@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_latest_state_in_process_equals_spark(spark, store, make_config, strategy):
    """The Arrow build (no Spark) and the Spark job give the same rows: a dirty tail over a clean
    section, stale writes that lose by rank, and remembered deletes."""
    cfg = make_config(
        segment_bytes=1500, compaction_strategy=strategy, compaction_strategy_header="v", delete_retention_ms=10
    )
    log = store.log(f"arrow{strategy}-0")

    def write(rows):
        writer.append(
            log,
            cfg,
            [{"key": f"k{k:03d}", "value": v, "timestamp": ts, "headers": _header(ver)} for k, v, ts, ver in rows],
        )
        writer.roll(log)

    # ranks out of offset order: timestamps and versions fall and rise; some records carry no version
    write(
        [(k, None if k % 9 == 0 else f"a{k}", 5000 - 37 * k % 700, None if k % 4 == 0 else k % 13) for k in range(80)]
    )
    write([(k, None if k % 6 == 0 else f"b{k}", 4000 + 11 * k % 900, k % 7) for k in range(0, 80, 2)])
    engine.run(log, cfg, NOW, spark=spark, force=True)
    # tombstones expire at the next cleaning (remembered deletes); updates mark records of kept files
    write([(k, f"c{k}", 6000 + k, 20) for k in range(1, 80, 5)])
    engine.run(log, cfg, NOW + 10**6, spark=spark, force=True)
    # a dirty tail: stale writes of deleted keys (older timestamp, lower version) and fresh ones
    write([(k, f"late{k}", 100 + k, 1) for k in range(0, 80, 3)])
    write([(k, f"new{k}", 10**7 + k, 99) for k in range(0, 80, 7)])
    if strategy != "offset":
        assert log.manifest().remembered, "expired tombstones are remembered"

    spark_rows = sorted(
        (r["key"], r["value"], r["offset"], r["timestamp"], [tuple(h) for h in r["headers"]])
        for r in latest_state_df(spark, log, cfg).collect()
    )
    table = latest_state_table(log, cfg)
    arrow_rows = [
        (r["key"], r["value"], r["offset"], r["timestamp"], [(h["name"], h["value"]) for h in r["headers"]])
        for r in table.to_pylist()
    ]
    assert arrow_rows == spark_rows and len(arrow_rows) > 20
    assert [r[0] for r in arrow_rows] == sorted(r[0] for r in arrow_rows)
    if strategy == "offset":
        assert {k: v for k, v, *_ in arrow_rows} == _replayed_state(log)
    # unordered (the Parquet write's): the same rows; the offset strategy's in the log's order, unsorted
    loose = [
        (r["key"], r["value"], r["offset"], r["timestamp"], [(h["name"], h["value"]) for h in r["headers"]])
        for r in latest_state_table(log, cfg, ordered=False).to_pylist()
    ]
    assert sorted(loose) == arrow_rows
    if strategy == "offset":
        assert [r[2] for r in loose] == sorted(r[2] for r in loose) and loose != arrow_rows
    # the whole log cleaned: no key is contested, the clean section's records are the state as they are
    engine.run(log, cfg, NOW + 2 * 10**6, spark=spark, force=True)
    assert log.manifest().last_cleaning.unique_keys_below >= log.manifest().segments[-1].base_offset
    spark_rows = sorted(
        (r["key"], r["value"], r["offset"], r["timestamp"], [tuple(h) for h in r["headers"]])
        for r in latest_state_df(spark, log, cfg).collect()
    )
    for ordered in (True, False):
        rows = [
            (r["key"], r["value"], r["offset"], r["timestamp"], [(h["name"], h["value"]) for h in r["headers"]])
            for r in latest_state_table(log, cfg, ordered=ordered).to_pylist()
        ]
        assert (rows if ordered else sorted(rows)) == spark_rows and len(rows) > 20


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


def _written_state(log, cfg, folder, share: float | None = None) -> list[tuple]:
    """The latest state as `write_latest_state` writes it: (rows written, parts, rows read back in part order)."""
    import glob

    import pyarrow as pa
    import pyarrow.parquet as pq

    from compaction_assets.state.latest_state import write_latest_state
    from compaction_assets.store.fs import Storage

    st = Storage.open(str(folder))
    shared = {} if share is None else {"share": share}
    count = write_latest_state(log, cfg, st, st.root, spark=_no_spark, **shared)
    parts = sorted(glob.glob(f"{folder}/*.parquet"))
    table = pa.concat_tables([pq.read_table(p) for p in parts])
    return count, len(parts), [(r["key"], r["value"], r["offset"], r["timestamp"]) for r in table.to_pylist()]


def test_offset_state_written_by_parts_equals_the_table(spark, store, make_config, tmp_path):
    """The offset strategy's state of a cleaned log, written a part a file: the rows of the table build, in
    its order, with a dirty tail (updates, tombstones, new keys), a deletion vector and a moved log start."""
    from compaction_assets.state.state_parts import written_by_parts

    cfg = make_config(segment_bytes=1500, delete_retention_ms=10**9)
    log = store.log("parts-0")

    def table_rows():
        return [
            (r["key"], r["value"], r["offset"], r["timestamp"])
            for r in latest_state_table(log, cfg, ordered=False).to_pylist()
        ]

    _fill(log, cfg, keys=60, rounds=3, seed=4)
    assert not written_by_parts(cfg, log.manifest())  # never cleaned: every key may be contested
    count, parts, rows = _written_state(log, cfg, tmp_path / "never")
    assert parts == 1 and rows == table_rows() and count == len(rows) > 20
    engine.run(log, cfg, NOW, spark=spark, force=True)
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": "u", "timestamp": 10**5 + k} for k in (3, 30)])
    writer.roll(log)
    engine.run(log, cfg, NOW, spark=spark, force=True)  # a few updates: their old records are marked
    # a dirty tail: a key in four again (one in three of those deleted), and new keys
    writer.append(
        log,
        cfg,
        [
            {"key": f"k{k:03d}", "value": None if k % 3 == 0 else f"t{k}", "timestamp": 10**6 + k}
            for k in range(0, 60, 4)
        ],
    )
    writer.append(log, cfg, [{"key": f"new{k}", "value": f"n{k}", "timestamp": 10**7 + k} for k in range(5)])
    writer.roll(log)
    assert written_by_parts(cfg, log.manifest()) and log.manifest().deleted
    count, parts, rows = _written_state(log, cfg, tmp_path / "tail")
    assert parts > 2 and rows == table_rows() and count == len(rows)
    assert {k: v for k, v, *_ in rows} == _replayed_state(log)
    engine.run(log, cfg, NOW, spark=spark, force=True)  # the whole log clean: no tail
    before = table_rows()
    writer.set_log_start(log, sorted(offset for _, _, offset, _ in before)[5])  # five records fall below it
    count, parts, rows = _written_state(log, cfg, tmp_path / "clean")
    assert rows == table_rows() and count == len(rows) == len(before) - 5
    assert {k: v for k, v, *_ in rows} == _replayed_state(log)


def test_offset_state_of_deleted_keys_only_is_an_empty_part(spark, store, make_config, tmp_path):
    cfg = make_config(segment_bytes=1500, delete_retention_ms=10**9)
    log = store.log("gone-0")
    writer.append(log, cfg, [{"key": f"k{k}", "value": "v", "timestamp": 1000 + k} for k in range(20)])
    writer.roll(log)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    writer.append(log, cfg, [{"key": f"k{k}", "value": None, "timestamp": 2000 + k} for k in range(20)])
    writer.roll(log)
    count, parts, rows = _written_state(log, cfg, tmp_path / "gone")
    assert (count, parts, rows) == (0, 1, [])


def test_offset_state_too_big_to_build_whole_is_written_by_parts(spark, store, make_config, tmp_path):
    """A log whose whole state would not fit this process, but whose tail and a file a thread do, is
    written file by file here, not sent to Spark (the memory share between the two needs)."""
    from compaction_assets.cleaning.decide.placement import available_memory
    from compaction_assets.state import latest_state

    cfg = make_config(segment_bytes=1500, delete_retention_ms=10**9)
    log = store.log("big-0")
    _fill(log, cfg, keys=400, rounds=2, seed=5)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": f"t{k}", "timestamp": 10**6 + k} for k in range(0, 400, 40)])
    writer.roll(log)
    m = log.manifest()
    share = latest_state.HELD_PER_VISIBLE_BYTE * m.total_size / available_memory() / 2  # half the whole's need
    assert not latest_state.fits_in_process(m, share) and latest_state.parts_fit_in_process(m, share)
    assert latest_state.written_here(log, cfg, m, share)
    count, parts, rows = _written_state(log, cfg, tmp_path / "big", share)  # spark=_no_spark: Spark is not asked
    assert parts > 2 and count == len(rows) and {k: v for k, v, *_ in rows} == _replayed_state(log)
    assert not latest_state.parts_fit_in_process(m, share / 100) and not latest_state.written_here(log, cfg, m, 0)
