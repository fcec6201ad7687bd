"""Cleaning cost follows the dirty data: segments that lose few records keep their files and their removed
offsets go to the log's deletion vector, which every reader applies; enough dead rows trigger a rewrite."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.tuning import DEFAULT_TUNING
from compaction_assets.log import writer
from compaction_assets.log.reader import dead_offsets, iter_records
from compaction_assets.log.spark_reads import ReadPaths, read_df, read_segments
from compaction_assets.state.latest_state import latest_state_df
from tests.tunings import mark_only

NOW = 10**12


def _state(spark, handle, cfg) -> dict:
    return {r["key"]: r["value"] for r in latest_state_df(spark, handle, cfg).collect()}


def _fill(handle, cfg, keys: int, rounds: int, ts0: int = 1000) -> None:
    for r in range(rounds):
        writer.append(
            handle,
            cfg,
            [{"key": f"k{k:04d}", "value": f"v{r}-{k}", "timestamp": ts0 + r * keys + k} for k in range(keys)],
        )
    writer.roll(handle)


def _update(log, cfg, keys, tag: str, ts: int) -> None:
    writer.append(log, cfg, [{"key": f"k{k:04d}", "value": f"{tag}-{k}", "timestamp": ts + k} for k in keys])
    writer.roll(log)


def test_a_few_updates_mark_records_instead_of_rewriting(spark, store, make_config):
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-0")
    _fill(log, cfg, keys=200, rounds=2)
    first = engine.run(log, cfg, NOW, spark=spark, force=True)
    assert first.stats.segments_rewritten > 0 and first.stats.segments_marked == 0
    files_before = {f.name for f in log.manifest().files()}

    # 5 of 200 keys updated: each touched segment loses far less than REWRITE_DEAD_FRACTION
    _update(log, cfg, (3, 50, 99, 150, 199), "new", 10**6)
    rep = engine.run(log, cfg, NOW, spark=spark, force=True)
    m = log.manifest()
    assert rep.stats.segments_rewritten == 0 and rep.stats.segments_marked >= 1
    assert rep.stats.records_rewritten == 0 and rep.stats.files_bytes_written == 0
    assert m.deleted and m.deleted["count"] == 5 == rep.stats.deletion_vector_records
    assert files_before <= {f.name for f in m.files()}, "no file of the clean section was rewritten"
    assert sum(s.dead for s in m.segments) == 5

    # every reader applies the vector: one record per key, the new value where updated
    records = list(iter_records(log))
    assert len(records) == 200 == len({r.key for r in records}) == m.total_records
    df_rows = read_df(spark, log).collect()
    assert [r["offset"] for r in df_rows] == [r.offset for r in records]
    state = _state(spark, log, cfg)
    assert state[b"k0050"] == b"new-50" and state[b"k0051"] == b"v1-51" and len(state) == 200
    assert set(dead_offsets(log, m).to_pylist()).isdisjoint(r.offset for r in records)
    # garbage collection keeps the vector
    log.collect_garbage(0)
    assert len(list(iter_records(log))) == 200


MARK_ONLY = mark_only()
REWRITE_MOST = replace(DEFAULT_TUNING, rewrite_dead_fraction=0.05)


def test_enough_dead_rows_rewrite_the_segment_and_leave_the_vector(spark, store, make_config):
    cfg = make_config(segment_bytes=100_000)
    log = store.log("dv-1")
    _fill(log, cfg, keys=100, rounds=1)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    _update(log, cfg, range(10), "a", 10**6)
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=MARK_ONLY)
    assert log.manifest().deleted["count"] == 10

    writer.append(log, cfg, [{"key": f"k{k:04d}", "value": None, "timestamp": 10**7 + k} for k in range(10, 20)])
    writer.roll(log)
    rep = engine.run(log, cfg, NOW, spark=spark, force=True, tuning=REWRITE_MOST)
    m = log.manifest()
    assert rep.stats.segments_rewritten >= 1
    assert m.deleted is None and all(s.dead == 0 for s in m.segments)
    state = _state(spark, log, cfg)
    assert len(state) == 90 and state[b"k0005"] == b"a-5" and b"k0015" not in state
    assert len(list(iter_records(log))) == m.total_records == 100  # 90 values + 10 tombstones kept


def test_dry_run_names_segments_to_rewrite_and_to_mark(spark, store, make_config):
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-2")
    _fill(log, cfg, keys=200, rounds=1)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    writer.append(log, cfg, [{"key": "k0007", "value": "x", "timestamp": 10**6}])
    writer.roll(log)
    dry = engine.dry_run(log, cfg, NOW, spark=spark, force=True)
    assert dry.segments_to_mark == 1 and dry.segments_to_rewrite == 0
    assert dry.superseded.records == 1


def test_an_incremental_cleaning_adds_only_its_new_entries_to_the_vector(spark, store, make_config):
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-3")
    _fill(log, cfg, keys=200, rounds=2)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    tuning = replace(DEFAULT_TUNING, dead_vector_max_files=3)
    seen: set[int] = set()
    for n, keys in enumerate([(3, 50), (99, 150, 199), (4, 51)]):
        _update(log, cfg, keys, f"u{n}", 10**6 * (n + 1))
        rep = engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning)
        m = log.manifest()
        files = m.deleted["files"]
        assert len(files) == n + 1, "each cleaning adds one file of its own entries, the old ones stay"
        new = set(log.st.read_parquet(log.path(files[-1])).column("offset").to_pylist())
        assert len(new) == len(keys) and not new & seen, "the new file holds only this cleaning's entries"
        seen |= new
        assert m.deleted["count"] == len(seen) == rep.stats.deletion_vector_records == sum(s.dead for s in m.segments)
        assert set(dead_offsets(log, m).to_pylist()) == seen

    # at the limit the vector is rebuilt in one file, with every entry still in force
    _update(log, cfg, (120,), "u3", 10**7)
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning)
    m = log.manifest()
    assert len(m.deleted["files"]) == 1 and m.deleted["count"] == len(seen) + 1 == sum(s.dead for s in m.segments)
    log.collect_garbage(0)
    records = list(iter_records(log))
    assert len(records) == 200 == len({r.key for r in records})
    state = _state(spark, log, cfg)
    assert state[b"k0050"] == b"u0-50" and state[b"k0051"] == b"u2-51" and state[b"k0120"] == b"u3-120"
    assert [r["offset"] for r in read_df(spark, log).collect()] == [r.offset for r in records]


@pytest.mark.parametrize("decision", ["grouped", "probed"])
def test_a_vector_mostly_of_rewritten_segments_is_rebuilt(spark, store, make_config, decision):
    """Grouped, the segment of k0099 is marked again; probed (the offset strategy's incremental
    decision), it loses nothing and keeps its entry as it is: rebuilt either way, with that entry."""
    base = replace(DEFAULT_TUNING, incremental_max_dirty_share=-1.0) if decision == "grouped" else DEFAULT_TUNING
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-4")
    _fill(log, cfg, keys=100, rounds=1)
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=base)
    _update(log, cfg, [*range(10), 99], "a", 10**6)
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=mark_only(base))
    before = log.manifest().deleted
    assert before["count"] == 11 and len(before["files"]) == 1
    # the first segment is rewritten (its 10 entries go stale), the one of k0099 only marked: rebuilt
    _update(log, cfg, (10,), "b", 10**7)
    rep = engine.run(log, cfg, NOW, spark=spark, force=True, tuning=replace(base, rewrite_dead_fraction=0.05))
    m = log.manifest()
    assert rep.stats.segments_rewritten >= 1
    assert rep.stats.segments_marked == (1 if decision == "grouped" else 0)
    assert m.deleted["files"] != before["files"] and len(m.deleted["files"]) == 1
    assert m.deleted["count"] == 1 == sum(s.dead for s in m.segments)
    state = _state(spark, log, cfg)
    assert state[b"k0000"] == b"a-0" and state[b"k0010"] == b"b-10" and state[b"k0099"] == b"a-99"
    assert len(state) == 100 == len(list(iter_records(log)))


def test_a_vector_named_by_an_older_manifest_is_read(spark, store, make_config):
    """Manifests written before the vector could have several files name one `file`."""
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-5")
    _fill(log, cfg, keys=200, rounds=2)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    _update(log, cfg, (3, 50), "u", 10**6)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    (folder,) = log.manifest().deleted["files"]
    log.update(lambda m: m.with_(deleted={"file": folder, "count": m.deleted["count"]}))
    m = log.manifest()
    assert len(dead_offsets(log, m)) == 2 and folder in log.referenced()
    assert len(list(iter_records(log))) == 200 == read_df(spark, log).count()
    _update(log, cfg, (7,), "v", 10**7)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    m = log.manifest()
    assert m.deleted["files"][0] == folder and m.deleted["count"] == 3
    assert len(list(iter_records(log))) == 200


def _plan(df) -> str:
    """The physical plan Spark chose for `df` (as `explain` prints it)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        df.explain()
    return out.getvalue()


def test_a_vector_above_the_broadcast_limit_is_joined_without_a_broadcast(spark, store, make_config):
    """A vector of more offsets than `broadcast_dead_max` never reaches a broadcast (its Parquet's size made
    Spark broadcast 9.8M offsets itself); both joins leave out the same records."""
    cfg = make_config(segment_bytes=2000)
    log = store.log("dv-9")
    _fill(log, cfg, keys=200, rounds=2)
    engine.run(log, cfg, NOW, spark=spark, force=True)
    _update(log, cfg, (3, 50, 99, 150, 199), "new", 10**6)
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=MARK_ONLY)
    m = log.manifest()
    assert m.deleted and m.deleted["count"] == 5
    segments = list(enumerate(m.segments))
    small, large = (
        read_segments(spark, log, m, segments, reads=ReadPaths(broadcast_dead_max=limit)) for limit in (5, 4)
    )
    assert "BroadcastHashJoin" in _plan(small)
    assert "BroadcastHashJoin" not in _plan(large) and "SortMergeJoin" in _plan(large)
    rows = sorted(r["offset"] for r in small.select("offset").collect())
    assert (
        rows == sorted(r["offset"] for r in large.select("offset").collect()) == [r.offset for r in iter_records(log)]
    )
    assert len(rows) == 200


def _update_segment(log, cfg, keys, tag: str, ts: int) -> None:
    """Update `keys` in a segment of their own, filled with new keys to 20 records (segment.bytes 520 holds
    20): a segment that fills segment.bytes merges with no neighbour, so each keeps its own dead share."""
    filler = [f"{tag}{j:03d}" for j in range(20 - len(keys))]
    writer.append(
        log,
        cfg,
        [
            {"key": k, "value": f"{tag}-{k}", "timestamp": ts + n}
            for n, k in enumerate([f"k{k:04d}" for k in keys] + filler)
        ],
    )
    writer.roll(log)


def test_a_segment_is_first_marked_only_well_below_the_rewrite_line(spark, store, make_config):
    """A segment the vector does not list yet is rewritten at `first_mark_dead_fraction` (0.4), one listed
    already at `rewrite_dead_fraction` (0.5): a first marking near the line would be undone soon after."""
    cfg = make_config(segment_bytes=520)
    fresh = store.log("dv-first-0")
    _fill(fresh, cfg, keys=20, rounds=1)
    _update_segment(fresh, cfg, range(9), "a", 10**6)  # 9 of the first segment's 20 rows dead: 45%
    rep = engine.run(fresh, cfg, NOW, spark=spark, force=True)
    assert rep.stats.segments_rewritten == 1 and rep.stats.segments_marked == 0
    assert fresh.manifest().deleted is None

    listed = store.log("dv-first-1")
    _fill(listed, cfg, keys=20, rounds=1)
    _update_segment(listed, cfg, range(3), "a", 10**6)  # 15%: marked
    engine.run(listed, cfg, NOW, spark=spark, force=True)
    assert listed.manifest().deleted["count"] == 3
    _update_segment(listed, cfg, range(3, 9), "b", 10**7)  # 45%, listed already: marked again, not rewritten
    rep = engine.run(listed, cfg, NOW, spark=spark, force=True)
    assert rep.stats.segments_rewritten == 0 and listed.manifest().deleted["count"] == 9
    _update_segment(listed, cfg, (9,), "c", 10**8)  # 50%: rewritten
    rep = engine.run(listed, cfg, NOW, spark=spark, force=True)
    assert rep.stats.segments_rewritten == 1 and rep.stats.records_rewritten == 10
    m = listed.manifest()
    assert m.segments[0].records == 10 and m.segments[0].dead == 0 and m.deleted is None
    state = _state(spark, listed, cfg)
    assert len(state) == 20 + 17 + 14 + 19
    assert state[b"k0002"] == b"a-k0002" and state[b"k0008"] == b"b-k0008" and state[b"k0009"] == b"c-k0009"
