"""The cleaning's shortcuts for small inputs give the same results as the general paths.

A read finds each tombstone's file stamp in one literal map or in one of several
(`ReadPaths.stamp_bucket_files`), a range of up to `collect_decision_max_rows` rows
(`collect_offset_decision_max_rows` for the offset strategy) brings its decision to the driver (figures
summed with Arrow) instead of caching it in Spark, and writes with little to read run in the driver, not in
Python workers (`driver_rewrite_max_rows`, `driver_mark_max_rows`); larger writes under a local master run
in the driver's threads (`local_master_writes_here`). Most tests use small logs, so here the same
logs also go through the general paths (every limit set below any size; the writes in Python workers, or
in threads; and a collected decision written by Python workers, as under a cluster's master) and must come
out identical, record for record and segment for segment.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.cleaner import decide
from compaction_assets.cleaning.decide.placement import (
    COLLECTED_WINNER,
    KEPT_OFFSET,
    DecideAt,
    RowCost,
    fits_here,
    place,
    write_threads,
)
from compaction_assets.cleaning.decide.spark_tasks import (
    group_partitions,
    keys_mostly_distinct,
    shuffle_partitions,
)
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.errors import CompactionError
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.log.spark_reads import ReadPaths, read_segments, segment_index
from compaction_assets.planning.planner import CleaningRange, cleaning_range
from compaction_assets.spark.lazy_session import local_cores, result_limit
from compaction_assets.store.log_store import LogStore
from compaction_assets.store.manifest import Segment

NOW = 10**12
DAY = 86_400_000


def _build(store: LogStore, make_config, strategy: str):
    """A log with several segments, tombstones stamped by a first cleaning, and a deletion vector."""
    extra = {"compaction_strategy_header": "version"} if strategy == "header" else {}
    cfg = make_config(segment_bytes=1500, compaction_strategy=strategy, delete_retention_ms=DAY, **extra)
    log = store.log("paths-0")
    for r in range(3):
        writer.append(
            log,
            cfg,
            [
                {
                    "key": f"k{k:03d}",
                    "value": None if (k + r) % 7 == 0 else f"v{r}-{k}",
                    "timestamp": 1000 + r * 100 + k,
                }
                for k in range(60)
            ],
        )
    writer.roll(log)
    return log, cfg


def _clean_more(spark, log, cfg, tuning: CleanerTuning = DEFAULT_TUNING) -> engine.StepReport:
    """Clean, update a few keys (so the next cleaning marks records), clean again; the second's report."""
    engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning)
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": f"new-{k}", "timestamp": 5000 + k} for k in (1, 20, 41)])
    writer.roll(log)
    return engine.run(log, cfg, NOW + 1, spark=spark, force=True, tuning=tuning)


def _figures(report: engine.StepReport) -> dict:
    """A cleaning's totals but its time."""
    return {k: v for k, v in report.stats.as_dict().items() if k != "clean_time_secs"}


def _segments(log) -> list[tuple]:
    return [
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
    ]


# the writes as large ones go, not in the driver's one thread; the decision in Spark, not here with Arrow
IN_WORKERS = replace(
    DEFAULT_TUNING,
    driver_rewrite_max_rows=-1,
    driver_mark_max_rows=-1,
    local_master_writes_here=False,
    local_decision_max_rows=-1,
)


def _general_paths(writes: str = "workers") -> CleanerTuning:
    """The tuning of the general paths (every limit below any size); the stamps in a map per file."""
    # the decision cached in Spark; the writes in Python workers (one Spark job), or in the driver's
    # threads (a local master's); a map per stamped file
    return replace(
        IN_WORKERS,
        collect_decision_max_rows=-1,
        collect_offset_decision_max_rows=-1,
        task_decision_max_rows=-1,
        local_master_writes_here=writes == "threads",
        reads=ReadPaths(stamp_bucket_files=1),
    )


# the offset strategy's decision made in the tasks of a group-by of several partitions (a large range's)
IN_TASKS = replace(
    DEFAULT_TUNING,
    rows_per_partition=40,
    local_decision_max_rows=-1,
    collect_offset_decision_max_rows=-1,
    incremental_max_dirty_share=-1.0,
)
# the offset strategy's range decided here with Arrow (a local master's), grouped rather than probed
HERE = replace(DEFAULT_TUNING, incremental_max_dirty_share=-1.0)


@pytest.mark.parametrize("strategy", ["offset", "timestamp"])
def test_small_and_general_paths_clean_alike(spark, tmp_path, make_config, strategy):
    results, routes = {}, {}
    for path in ("small", "workers", "threads", "collected_workers", "tasks", "here"):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, strategy)
        tuning = {
            "workers": _general_paths("workers"),
            "threads": _general_paths("threads"),
            # a collected decision whose write runs in Python workers (a cluster's master): its
            # kept offsets go back to Spark
            "collected_workers": IN_WORKERS,
            "tasks": IN_TASKS,
            "here": HERE,
        }.get(path, DEFAULT_TUNING)
        report = _clean_more(spark, log, cfg, tuning)
        records = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(log)]
        results[path] = (records, _segments(log), _figures(report))
        routes[path] = report.route
    small = results["small"]
    assert small[0]
    # a decision collected here (grouped or probed) whose kept offsets went to the workers
    assert routes["collected_workers"].decision in ("collected", "probed"), routes["collected_workers"]
    assert routes["collected_workers"].write_threads == routes["workers"].write_threads == 0
    # the offset strategy's large range decided in its group-by's tasks (the others have no such path)
    assert (routes["tasks"].decision == "task") == (strategy == "offset"), routes["tasks"]
    # ... or here with Arrow (the test session's master is local)
    assert routes["here"].decision == ("local" if strategy == "offset" else "collected"), routes["here"]
    for path in ("workers", "threads", "collected_workers", "tasks", "here"):
        assert results[path][0] == small[0], path
        assert results[path][1] == small[1], path
        assert results[path][2] == small[2], path
    assert small[2]["segments_marked"] >= 1 or small[2]["segments_rewritten"] >= 1
    # the test session's master is local[2] on a machine of 2 cores or more: the writes ran in 2 threads
    assert routes["threads"].write_threads == local_cores(spark) >= 2


def _span(prefix_rows: int, newer_rows: int) -> CleaningRange:
    """A range of a deduplicated prefix of `prefix_rows` rows (none: a first cleaning) below a newer segment."""
    unique = [(0, Segment("p", 0, prefix_rows, records=prefix_rows, size=30 * prefix_rows))] if prefix_rows else []
    newer = [
        (len(unique), Segment("n", prefix_rows, prefix_rows + newer_rows, records=newer_rows, size=30 * newer_rows))
    ]
    return CleaningRange(prefix_rows + newer_rows, unique + newer, unique, newer, prefix_rows + newer_rows, newer_rows)


class _ClusterSession:
    """A session whose master is a cluster's (its conf shows the master and Spark's defaults)."""

    class conf:
        @staticmethod
        def get(key, default=None):
            return "yarn" if key == "spark.master" else default


def test_the_placement_is_chosen_once_from_the_range_the_master_and_the_memory(spark, make_config):
    """Where a cleaning runs, decided before it starts from the range's rows, the session's master and
    the memory available (cleaning/decide/placement.py's `place`), for every route of the decision."""
    offset, timestamp = make_config(compaction_strategy="offset"), make_config(compaction_strategy="timestamp")
    cores = local_cores(spark)
    # a few newer rows above a deduplicated prefix, under a local master: probed, all of it here
    probed = place(spark, offset, _span(100_000, 1_000))
    assert (probed.decide, probed.here.threads, probed.probe_threads) == (DecideAt.PROBED, cores, cores)
    assert probed.kept_here and probed.only_touched_keys and "probed here" in probed.reason
    # ... under a cluster's master: the newer rows grouped by Spark, a large prefix probed by its workers
    cluster = place(_ClusterSession(), offset, _span(3_000_000, 1_000))
    assert (cluster.decide, cluster.here.threads, cluster.probe_threads, cluster.cores) == (DecideAt.PROBED, 0, 0, None)
    assert "grouped by Spark" in cluster.reason
    # a first cleaning under a local master: decided here; without memory to spare: cached in Spark
    assert place(spark, offset, _span(0, 1_000)).decide is DecideAt.LOCAL
    no_memory = place(spark, offset, _span(0, 1_000), replace(DEFAULT_TUNING, driver_memory_share=0.0))
    assert no_memory.decide is DecideAt.CACHED and not no_memory.kept_here
    # the offset strategy without its local paths: its winners collected, or decided in the group-by's tasks
    in_spark = replace(DEFAULT_TUNING, local_decision_max_rows=-1)
    assert place(spark, offset, _span(0, 1_000), in_spark).decide is DecideAt.COLLECTED_WINNERS
    no_collect = replace(in_spark, collect_offset_decision_max_rows=-1)
    assert place(spark, offset, _span(0, 1_000), no_collect).decide is DecideAt.TASKS
    # the other strategies group by Spark: collected while small, cached beyond; only the touched keys
    # grouped in a large range whose newer rows are few
    assert place(spark, timestamp, _span(0, 1_000)).decide is DecideAt.COLLECTED
    touched = place(spark, timestamp, _span(9_000_000, 100_000))
    assert (touched.decide, touched.only_touched_keys) == (DecideAt.CACHED, True) and "touch" in touched.reason
    # the write's place, chosen once the decision says how many offsets it keeps
    big = replace(DEFAULT_TUNING, driver_rewrite_max_rows=0, driver_mark_max_rows=0)
    assert place(spark, offset, _span(0, 1_000), big).write_threads(spark, 10, 10, 100) == cores
    assert (
        place(spark, offset, _span(0, 1_000), replace(big, local_master_writes_here=False)).write_threads(
            spark, 10, 10, 100
        )
        == 0
    )


@pytest.mark.parametrize("strategy", ["offset", "timestamp"])
def test_the_placement_a_dry_run_shows_is_the_route_the_cleaning_takes(spark, tmp_path, make_config, strategy):
    for path, tuning in (("small", DEFAULT_TUNING), ("workers", _general_paths()), ("here", HERE)):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, strategy)
        engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning)
        writer.append(log, cfg, [{"key": f"k{k:03d}", "value": f"new-{k}", "timestamp": 5000 + k} for k in (1, 20)])
        writer.roll(log)
        dry = engine.dry_run(log, cfg, NOW + 1, spark=spark, force=True, tuning=tuning)
        report = engine.run(log, cfg, NOW + 1, spark=spark, force=True, tuning=tuning)
        assert dry.placement is not None and report.route is not None, path
        assert dry.placement.decide.decision == report.route.decision, path
        assert dry.placement.only_touched_keys == report.route.only_touched_keys, path
        assert dry.placement.reason == report.route.reason != "", path
        assert "placement" not in dry.as_dict()  # the CLI's dry run shows what it always showed


def test_local_cores_reads_the_master(spark):
    """A local master's cores (capped by this machine's), None for a cluster's master."""
    import os

    class Conf:
        def __init__(self, master):
            self.master = master

        def get(self, key):
            assert key == "spark.master"
            return self.master

    class Session:
        def __init__(self, master):
            self.conf = Conf(master)

    cores = os.cpu_count()
    assert local_cores(Session("local")) == 1
    assert local_cores(Session("local[*]")) == cores
    assert local_cores(Session("local[1]")) == 1
    assert local_cores(Session("local[64,3]")) == cores
    assert local_cores(Session("spark://127.0.0.1:7077")) is None
    assert local_cores(Session("yarn")) is None
    assert local_cores(spark) == min(2, cores)  # the test session's master: local[2]


def test_stamps_found_in_one_map_or_in_buckets_give_the_same_segments_and_horizons(spark, store, make_config):
    log, cfg = _build(store, make_config, "offset")
    raw = log.manifest()
    assert len(raw.segments) > 2
    pairs = list(enumerate(raw.segments))
    found = read_segments(spark, log, raw, pairs).select("offset", segment_index(pairs).alias("seg")).collect()
    # each row's segment, found from its offset alone, is the one whose range holds it
    assert all(raw.segments[r["seg"]].contains(r["offset"]) for r in found)
    assert len({r["seg"] for r in found}) == len([s for s in raw.segments if s.records])
    _clean_more(spark, log, cfg)
    m = log.manifest()
    assert m.deleted, "the log has a deletion vector"
    assert any(f.stamp is not None for f in m.files()), "some file carries a stamp"
    segs = list(enumerate(m.segments))

    def rows(reads: ReadPaths):
        df = read_segments(spark, log, m, segs, reads=reads).withColumn("seg_idx", segment_index(segs))
        return sorted(
            (r["offset"], r["seg_idx"], r["delete_horizon"])
            for r in df.select("offset", "seg_idx", "delete_horizon").collect()
        )

    stamped = sum(1 for f in m.files() if f.stamp is not None)
    mapped = rows(ReadPaths(stamp_bucket_files=stamped))  # one map
    joined = rows(ReadPaths(stamp_bucket_files=1))  # a bucket per file (some empty)
    assert mapped == joined and len(mapped) == m.total_records
    assert any(h is not None for _, _, h in mapped), "tombstone horizons (from stamps) are read"
    # both agree with the Python reader, which applies the same stamps and vector
    assert [o for o, _, _ in mapped] == [r.offset for r in iter_records(log)]
    assert all(m.segments[i].contains(o) for o, i, _ in mapped)


@pytest.mark.parametrize(
    "strategy, writes, vector",
    [
        ("offset", "workers", "grows"),
        ("offset", "threads", "grows"),
        ("offset", "threads", "rebuilt"),
        ("timestamp", "workers", "grows"),
    ],
)
def test_grouping_only_the_touched_keys_cleans_like_grouping_all(
    spark, tmp_path, make_config, strategy, writes, vector
):
    """Above the prefix that the last cleaning left with one record per key, the newer rows and the
    older rows of their keys are grouped, the others are their own winners (the offset strategy probes
    the prefix segment by segment instead, in Python workers or in the driver's threads): same log,
    record for record, same figures."""
    results = {}
    for path in ("touched", "all"):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, strategy)
        routes = []
        tuning = replace(_general_paths(writes), incremental_min_rows=0)
        if vector == "rebuilt":  # every cleaning rewrites the vector whole: untouched entries carried
            # (and the probe reads its files a row at a time: figures summed over batches)
            tuning = replace(tuning, dead_vector_max_files=0, probe_batch_rows=1)
        elif writes == "threads":  # the probe reads its files two rows at a time
            tuning = replace(tuning, probe_batch_rows=2)
        if path == "all":
            tuning = replace(tuning, incremental_max_dirty_share=-1.0)
        seen = []
        routes.append(engine.run(log, cfg, NOW, spark=spark, force=True, tuning=tuning).route)
        rounds = [
            # updates, a delete, a late record (loses under the timestamp strategy), a key never seen
            [("k001", "new-1", 5000), ("k003", None, 5001), ("k005", "late-5", 1), ("k200", "fresh", 5002)],
            # the deleted key again, an update; the cleaning runs after the tombstones' horizons
            [("k003", "back-3", 6000), ("k020", "new-20", 6001)],
        ]
        for n, batch in enumerate(rounds):
            writer.append(log, cfg, [{"key": k, "value": v, "timestamp": ts} for k, v, ts in batch])
            writer.roll(log)
            report = engine.run(log, cfg, NOW + 1 + n * 2 * DAY, spark=spark, force=True, tuning=tuning)
            routes.append(report.route)
            seen.append(
                ([(r.offset, r.key, r.value, r.timestamp) for r in iter_records(log)], _segments(log), _figures(report))
            )
        results[path] = (seen, [r.only_touched_keys for r in routes], [r.decision == "probed" for r in routes])
    (touched, how_touched, probed), (every, how_all, _) = results["touched"], results["all"]
    assert how_touched == [False, True, True] and how_all == [False, False, False]
    assert probed == [False, strategy == "offset", strategy == "offset"]
    for (records_t, segments_t, stats_t), (records_a, segments_a, stats_a) in zip(touched, every):
        assert records_t and records_t == records_a
        assert segments_t == segments_a
        assert stats_t == stats_a
    assert touched[-1][2]["tombstones_removed"] >= 1, "the last cleaning removes expired tombstones"


def test_a_sample_of_keys_tells_distinct_keys_from_repeated_ones(store, make_config):
    """Keys that barely repeat skip the partial aggregation; keys that repeat keep it."""
    cfg = make_config(segment_bytes=1500)
    distinct, repeated = store.log("distinct-0"), store.log("repeated-0")
    writer.append(distinct, cfg, [{"key": f"k{k:04d}", "value": "v", "timestamp": k} for k in range(400)])
    writer.append(repeated, cfg, [{"key": f"k{k % 20:04d}", "value": "v", "timestamp": k} for k in range(400)])
    for log in (distinct, repeated):
        writer.roll(log)
    assert keys_mostly_distinct(distinct, list(enumerate(distinct.manifest().segments)))
    assert not keys_mostly_distinct(repeated, list(enumerate(repeated.manifest().segments)))
    assert not keys_mostly_distinct(distinct, [])


@pytest.mark.parametrize("strategy", ["offset", "timestamp"])
def test_grouping_with_or_without_a_partial_aggregation_cleans_alike(spark, tmp_path, make_config, strategy):
    """Rows hashed by key before one aggregation decide as a partial then final aggregation does."""
    results = {}
    for path in ("partial", "hashed"):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, strategy)
        # as many partitions as the session's shuffle
        tuning = replace(
            _general_paths(), rows_per_partition=1, distinct_skips_partial=0.0 if path == "hashed" else 1.01
        )
        report = _clean_more(spark, log, cfg, tuning)
        records = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(log)]
        results[path] = (records, _segments(log), _figures(report))
    assert results["partial"][0] and results["partial"] == results["hashed"]


@pytest.mark.parametrize("strategy", ["offset", "timestamp", "header"])
def test_collected_and_cached_decisions_have_the_same_figures(spark, store, make_config, strategy):
    """The per-segment figures summed with Arrow (a collected decision) equal Spark's (a cached one):
    kept records and bytes, timestamps, tombstones, horizons, stamps and expired tombstones."""
    log, cfg = _build(store, make_config, strategy)
    _clean_more(spark, log, cfg)
    writer.append(log, cfg, [{"key": f"k{k:03d}", "value": None, "timestamp": 9000 + k} for k in (2, 30)])
    writer.roll(log)
    m = log.manifest()
    u = m.segments[-1].base_offset
    found = {}
    # grouped, not probed; the decision collected, cached, or (the offset strategy) made in the tasks
    # of a group-by of several partitions, each task's figures added up here
    grouped = replace(DEFAULT_TUNING, incremental_max_dirty_share=-1.0)
    paths = {
        "collected": replace(
            grouped, collect_decision_max_rows=10**9, collect_offset_decision_max_rows=10**9, local_decision_max_rows=-1
        ),
        "here": grouped,
        "cached": replace(
            grouped,
            collect_decision_max_rows=-1,
            collect_offset_decision_max_rows=-1,
            task_decision_max_rows=-1,
            local_decision_max_rows=-1,
        ),
        "task": replace(
            grouped,
            collect_decision_max_rows=-1,
            collect_offset_decision_max_rows=-1,
            rows_per_partition=40,
            local_decision_max_rows=-1,
        ),
    }
    for path, tuning in paths.items():
        # late enough that the first tombstones' horizons have passed, so some are removed
        d = decide(spark, log, m, cfg, cleaning_range(m, u), NOW + 2 * DAY, tuning=tuning)
        d.release()
        found[path] = (d.figures, {i: sorted(h) for i, h in d.horizons.items()}, d.stats, type(d).__name__)
    collected, cached = found["collected"], found["cached"]
    assert (collected[3], cached[3]) == ("CollectedDecision", "CachedDecision")
    assert collected[:3] == cached[:3]
    assert found["task"] == (*cached[:3], "TaskDecision" if strategy == "offset" else "CachedDecision")
    assert found["here"] == (*cached[:3], "LocalDecision" if strategy == "offset" else "CollectedDecision")
    assert collected[2].tombstones_removed > 0 and collected[2].records_superseded > 0
    assert all(p.first_ts is not None for p in collected[0].values() if p.kept)
    # the expired tombstones' bytes (the key-level dry run reads them from these figures)
    assert sum(p.removed_bytes for p in collected[0].values()) > 0


def test_a_probed_segment_that_disagrees_with_its_metadata_stops_the_cleaning(spark, store, make_config):
    """The probe counts each segment's visible records: a count other than the manifest's (files and
    metadata out of step) refuses the cleaning, which changes nothing."""
    log, cfg = _build(store, make_config, "offset")
    _clean_more(spark, log, cfg)
    writer.append(log, cfg, [{"key": "k005", "value": "again", "timestamp": 9000}])
    writer.roll(log)
    log.update(lambda m: m.with_(segments=(replace(m.segments[0], records=m.segments[0].records + 1), *m.segments[1:])))
    before = log.manifest()
    with pytest.raises(
        CompactionError,
        match=r"CorruptLogError: log 'paths-0': segment \[0, \d+\) holds \d+ "
        r"visible records, its metadata says \d+: its files and the manifest",
    ):
        engine.run(log, cfg, NOW + 2, spark=spark, force=True)
    after = log.manifest()
    assert after.segments == before.segments and after.deleted == before.deleted and after.uncleanable


# The probe, the collected decisions and the writes here are bounded by the memory they need
# (cleaning/decide/placement.py): with no memory to spare (`driver_memory_share` 0) a log
# takes their general twins and must come out the same.


def test_rows_fit_by_memory_and_the_result_limit_unless_the_tuning_gives_a_limit(spark):
    assert fits_here(spark, 10, 10, COLLECTED_WINNER, 0.0)  # a given limit wins over memory
    assert not fits_here(spark, 11, 10, COLLECTED_WINNER, 1.0)
    assert not fits_here(spark, 1, -1, KEPT_OFFSET, 1.0)  # -1: the general path at every size
    assert fits_here(spark, 1000, 0, COLLECTED_WINNER, 0.25)  # a few rows fit any machine
    assert not fits_here(spark, 1, 0, COLLECTED_WINNER, 0.0)  # no memory to spare
    # the test session leaves spark.driver.maxResultSize at Spark's 1 GiB: results above it do not fit,
    # however much memory this process has
    assert result_limit(spark) == 1 << 30
    shipped = RowCost(held=0, shipped=1 << 10)
    assert fits_here(spark, 1 << 20, 0, shipped, 1.0)
    assert not fits_here(spark, (1 << 20) + 1, 0, shipped, 1.0)
    # rows found in this process ship nothing: the result limit does not bound them, the memory still does
    assert fits_here(spark, (1 << 20) + 1, 0, shipped, 1.0, shipped=False)
    assert not fits_here(spark, 1, 0, COLLECTED_WINNER, 0.0, shipped=False)
    # a write's kept offsets already here (a collected decision) need no memory check, a given limit still holds
    big = replace(DEFAULT_TUNING, driver_rewrite_max_rows=0, driver_mark_max_rows=0, driver_memory_share=0.0)
    cores = local_cores(spark)
    assert write_threads(spark, cores, 10, 10, 1 << 40, True, big) == cores
    assert write_threads(spark, cores, 10, 10, 1 << 40, False, big) == 0
    assert write_threads(spark, cores, 10, 10, 5, True, replace(big, local_write_max_kept=4)) == 0


def test_paths_chosen_by_memory_clean_like_the_general_paths(spark, tmp_path, make_config):
    results, routes = {}, {}
    # the writes go by the kept offsets' memory, not the driver's one thread for small writes
    base = replace(DEFAULT_TUNING, driver_rewrite_max_rows=-1, driver_mark_max_rows=-1)
    for path, share in (("memory", base.driver_memory_share), ("general", 0.0)):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, "offset")
        report = _clean_more(spark, log, cfg, replace(base, driver_memory_share=share))
        results[path] = (
            [(r.offset, r.key, r.value, r.timestamp) for r in iter_records(log)],
            _segments(log),
            _figures(report),
        )
        routes[path] = report.route
    assert routes["memory"].decision == "probed" and routes["memory"].write_threads == local_cores(spark)
    # no memory to spare: the decision is not collected either, but cached in Spark
    assert routes["general"].decision == "cached" and routes["general"].write_threads == 0
    assert not routes["general"].only_touched_keys
    assert results["memory"][0] and results["memory"] == results["general"]
    assert results["memory"][2]["segments_marked"] + results["memory"][2]["segments_rewritten"] >= 1


def test_a_large_range_is_grouped_in_tasks_of_bounded_rows():
    """No group-by task holds more than `group_task_max_rows` rows' keys, whatever the session's partitions:
    50M records of distinct keys in the session's 8 tasks ran a 1 GiB Spark driver out of memory."""
    assert group_partitions(50_000_000, 8) == 100
    assert group_partitions(4_000_000, 8) == 0  # within the session's partitions: a partial aggregation
    assert group_partitions(500_000, 8) == 5  # a small range: as many partitions as its size needs
    assert group_partitions(60_000, 8) == 2  # at least two
    for rows in (8_000_001, 20_000_000, 123_456_789):
        parts = group_partitions(rows, 8) or 8
        assert -(-rows // parts) <= DEFAULT_TUNING.group_task_max_rows, rows


@pytest.mark.parametrize("strategy", ["offset", "timestamp"])
def test_grouping_in_more_tasks_than_the_session_has_cleans_alike(spark, tmp_path, make_config, strategy):
    """A range hashed into more partitions than the session's shuffle (a task's rows bounded) cleans as
    the session's partitions do, record for record, segment for segment, figure for figure."""
    results = {}
    for path, task_rows in (("session", 10**9), ("bounded", 7)):
        store = LogStore(str(tmp_path / path), gc_grace_s=0)
        log, cfg = _build(store, make_config, strategy)
        tuning = replace(_general_paths(), rows_per_partition=1, group_task_max_rows=task_rows)
        rows = sum(s.records for s in log.manifest().segments)
        assert group_partitions(rows, shuffle_partitions(spark), tuning) == (0 if path == "session" else -(-rows // 7))
        report = _clean_more(spark, log, cfg, tuning)
        records = [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(log)]
        results[path] = (records, _segments(log), _figures(report))
    assert results["session"][0] and results["session"] == results["bounded"]
    assert results["session"][2]["segments_marked"] + results["session"][2]["segments_rewritten"] >= 1
