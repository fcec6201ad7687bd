"""The offset strategy's decision made in this process with Arrow (cleaning/decide/arrow_decision.py): its keys split
into buckets by a hash, the buckets' winners and figures equal to Spark's decision, and the choice of
that path and its buckets by the memory the range needs (cleaning/decide/placement.py)."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.cleaner import decide
from compaction_assets.cleaning.decide.arrow_decision import newer_keys, newer_winners
from compaction_assets.cleaning.decide.placement import (
    DECIDED_HERE_ROW_BYTES,
    DECIDING_HERE_ROW_BYTES,
    MAX_HERE_BUCKETS,
    HerePlan,
    available_memory,
    decide_here_plan,
)
from compaction_assets.cleaning.tuning import DEFAULT_TUNING
from compaction_assets.log import writer
from compaction_assets.log.reader import dead_offsets, iter_records
from compaction_assets.planning.planner import cleaning_range
from compaction_assets.segments.offset_map import KEY_HASH, key_hash, split_by_key
from compaction_assets.spark.lazy_session import local_cores
from compaction_assets.store.log_store import LogStore
from tests.cleaning.test_small_and_large_paths import _build, _clean_more

NOW = 10**12
DAY = 86_400_000
# grouped, not probed: every cleaning of these small logs decides its whole range
GROUPED = replace(DEFAULT_TUNING, incremental_max_dirty_share=-1.0)
IN_SPARK = replace(GROUPED, local_decision_max_rows=-1)


def test_a_split_keeps_every_row_of_a_key_in_one_bucket():
    keys = [f"k{i % 97}".encode() for i in range(1_000)]
    table = pa.table({"key": pa.array(keys, pa.binary()), "offset": pa.array(np.arange(1_000), pa.int64())})
    parts = split_by_key(table, 5)
    assert len(parts) == 5 and sum(len(p) for p in parts) == 1_000
    seen = [set(p.column("key").to_pylist()) for p in parts]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1 :])
    # a bucket's keys are those of its hash, and its rows in the table's order
    assert all((key_hash(p.column("key")) % np.uint64(5) == bucket).all() for bucket, p in enumerate(parts))
    offsets = [p.column("offset").to_pylist() for p in parts]
    assert all(o == sorted(o) for o in offsets) and sorted(o for part in offsets for o in part) == list(range(1_000))
    # the key's hash goes with its rows
    assert all(p.column(KEY_HASH).to_pylist() == key_hash(p.column("key")).tolist() for p in parts)
    assert [len(p) for p in split_by_key(table.slice(0, 0), 5)] == [0] * 5
    assert split_by_key(table, 1) == [table.append_column(KEY_HASH, pa.array(key_hash(table.column("key"))))]


def _log(store: LogStore, make_config):
    """Several segments, tombstones (stamped by a first cleaning), later updates and a deletion vector."""
    return _build(store, make_config, "offset")


@pytest.mark.parametrize("bucket_rows", [10**9, 7])
def test_decided_here_in_one_or_many_buckets_cleans_as_spark_decides(spark, tmp_path, make_config, bucket_rows):
    """Record for record, segment for segment, figure for figure: two cleanings (the second reads a
    deletion vector and stamped tombstones) and a third after the first tombstones' horizons."""
    results, routes = {}, {}
    for path, tuning in (("here", replace(GROUPED, local_decision_bucket_rows=bucket_rows)), ("spark", IN_SPARK)):
        log, cfg = _log(LogStore(str(tmp_path / path), gc_grace_s=0), make_config)
        seen = []
        for n, batch in enumerate(([], [1, 20, 41], [3, 5])):
            if batch:
                writer.append(
                    log, cfg, [{"key": f"k{k:03d}", "value": f"new-{k}", "timestamp": 5000 + k} for k in batch]
                )
                writer.roll(log)
            report = engine.run(log, cfg, (NOW, NOW + 1, NOW + 2 * DAY)[n], spark=spark, force=True, tuning=tuning)
            routes.setdefault(path, []).append(report.route.decision)
            stats = {k: v for k, v in report.stats.as_dict().items() if k != "clean_time_secs"}
            seen.append(
                (
                    [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(log)],
                    [
                        (
                            s.base_offset,
                            s.next_offset,
                            s.records,
                            s.size,
                            s.min_ts,
                            s.max_ts,
                            s.first_ts,
                            s.min_pos_ts,
                            s.tombstones,
                            s.horizons,
                            s.dead,
                        )
                        for s in log.manifest().segments
                    ],
                    stats,
                )
            )
        results[path] = seen
    assert routes == {"here": ["local"] * 3, "spark": ["collected"] * 3}
    assert results["here"][0][0] and results["here"] == results["spark"]
    assert results["here"][-1][2]["tombstones_removed"] >= 1
    assert any(s[-1] for s in results["here"][1][1]), "the second cleaning marked records in the deletion vector"


def test_a_decision_here_reads_from_the_log_start(spark, store, make_config):
    """Records below the log start offset (deleted by retention or a delete-records request) are not
    read: the figures match Spark's, whose reader filters them alike."""
    log, cfg = _log(store, make_config)
    log.update(lambda m: m.with_(log_start_offset=25))
    m = log.manifest()
    span = cleaning_range(m, m.segments[-1].next_offset)
    here, in_spark = (decide(spark, log, m, cfg, span, NOW, tuning=t) for t in (GROUPED, IN_SPARK))
    assert type(here).__name__ == "LocalDecision" and type(in_spark).__name__ == "CollectedDecision"
    assert (here.figures, here.stats) == (in_spark.figures, in_spark.stats)
    assert sorted(here.kept.column("offset").to_pylist()) == sorted(in_spark.kept.column("offset").to_pylist())
    assert min(here.kept.column("offset").to_pylist()) >= 25


def test_the_memory_a_range_needs_chooses_here_or_spark_and_the_buckets(spark):
    cores = local_cores(spark)
    assert cores and decide_here_plan(cores, 1_000, DEFAULT_TUNING) == HerePlan(cores, 1)
    assert decide_here_plan(cores, 1_000, replace(DEFAULT_TUNING, local_decision_max_rows=-1)).threads == 0
    assert decide_here_plan(cores, 1_000, replace(DEFAULT_TUNING, driver_memory_share=0.0)).threads == 0
    # a given row limit stands for the memory, as fits_here's does
    assert decide_here_plan(
        cores, 10, replace(DEFAULT_TUNING, local_decision_max_rows=10, driver_memory_share=0.0)
    ).threads
    assert decide_here_plan(cores, 11, replace(DEFAULT_TUNING, local_decision_max_rows=10)).threads == 0
    # the tuning's bucket rows; then as many more buckets as the memory share needs
    assert decide_here_plan(cores, 9_000_000, DEFAULT_TUNING).buckets >= 3
    # in whole rounds of a bucket a thread
    assert decide_here_plan(cores, 9_000_000, DEFAULT_TUNING).buckets % cores == 0
    rows = 50_000_000
    # a share of the memory available that holds the narrow rows and a twentieth of the deciding, a
    # bucket a thread at once
    share = (DECIDED_HERE_ROW_BYTES * rows + cores * DECIDING_HERE_ROW_BYTES * rows // 20) / available_memory()
    assert 19 <= decide_here_plan(cores, rows, replace(DEFAULT_TUNING, driver_memory_share=share)).buckets <= 22
    # too little to spare for the narrow rows, or more buckets than the limit: Spark decides
    share = DECIDED_HERE_ROW_BYTES * rows / available_memory()
    assert decide_here_plan(cores, rows, replace(DEFAULT_TUNING, driver_memory_share=share)).threads == 0
    assert (
        decide_here_plan(cores, MAX_HERE_BUCKETS * 10**9, replace(DEFAULT_TUNING, local_decision_bucket_rows=1)).threads
        == 0
    )


def test_the_probes_newer_winners_found_here_or_in_spark_clean_alike(spark, tmp_path, make_config):
    """The incremental decision (the prefix probed) with the newer rows' winners found here or grouped in
    Spark: the same log, record for record, segment for segment, figure for figure."""
    results = {}
    for path, tuning in (("here", DEFAULT_TUNING), ("spark", replace(DEFAULT_TUNING, local_decision_max_rows=-1))):
        log, cfg = _log(LogStore(str(tmp_path / path), gc_grace_s=0), make_config)
        engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning)
        writer.append(
            log,
            cfg,
            [
                {"key": f"k{k:03d}", "value": None if k == 9 else f"new-{k}", "timestamp": 5000 + k}
                for k in (1, 9, 20, 20, 41)
            ],
        )
        writer.roll(log)
        report = engine.run(log, cfg, NOW + 1, spark=spark, force=True, tuning=tuning)
        assert report.route.decision == "probed", (path, report.route)
        results[path] = (
            [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(log)],
            [
                (s.base_offset, s.next_offset, s.records, s.size, s.first_ts, s.tombstones, s.horizons, s.dead)
                for s in log.manifest().segments
            ],
            {k: v for k, v in report.stats.as_dict().items() if k != "clean_time_secs"},
        )
    assert results["here"][0] and results["here"] == results["spark"]
    assert results["here"][2]["records_superseded"] >= 4


def test_the_keys_a_probe_tests_are_its_newer_records_keys(spark, store, make_config):
    """The newer records' keys that the probe's threads test while the winners are found, read apart from
    them (decide.arrow_decision.newer_keys): every visible record's key (the log start and the deletion vector
    applied), the keys of newer_winners."""
    log, cfg = _log(store, make_config)
    _clean_more(spark, log, cfg)  # a second cleaning marks records in the deletion vector
    log.update(lambda m: m.with_(log_start_offset=25))
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": "later", "timestamp": 6000} for k in (1, 1, 50)])
    m = log.manifest()
    segments = list(enumerate(m.segments))
    assert any(seg.dead for _, seg in segments)
    vector = functools.partial(dead_offsets, log, m)
    keys = newer_keys(log, m, segments, vector).to_pylist()
    assert sorted(keys) == sorted(r.key for r in iter_records(log)) and len(keys) > len(set(keys)) > 0
    assert set(keys) == set(newer_winners(log, m, segments, vector, 2, 3).column("key").to_pylist())
