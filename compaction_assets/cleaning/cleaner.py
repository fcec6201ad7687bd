"""How to clean (SPEC §6): the Spark job that rewrites the segments below the first uncleanable offset.

Two phases, so that full records are read only where a file must be rewritten and never shuffled:
  decide  - a narrow scan (key, offset, rank, tombstone flag, horizon) of the rewritten range picks
            the winner of every key, applies the delete horizons, the resurrection guard and the
            remembered deletes, and aggregates per segment (small results only reach the driver);
            a winner's segment is found from its offset after the group-by, not for every record;
            under the offset strategy, above a prefix the last cleaning left with one record per key,
            only the newer rows are grouped and the prefix is probed segment by segment (probe_task.py);
  apply   - the write (rewrite_task.py): a segment with at least REWRITE_DEAD_FRACTION of its rows dead
            is rewritten by streaming its files through pyarrow, consecutive such segments that the
            cleaning merges into one into a single file; a segment that loses fewer records keeps its
            files and its removed offsets go to the log's deletion vector; a segment that only needs
            tombstone horizons gets them as a file-level stamp. One job in Python workers on a cluster;
            in this process (a thread a core) when the master is local or the write is small, since
            workers there would run on the same cores after a process start and a copy through the JVM.
So a cleaning's writes follow what changed, not the log's size. Nothing reaches the driver but
per-segment figures, the names of written files, the few held tombstones and, when it writes itself,
the kept offsets of the segments it writes (about 12 bytes a kept record).
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from compaction_assets.cleaning.planner import rewritten_segments
from compaction_assets.cleaning.latest_state import unique_keys_below
from compaction_assets.errors import CorruptLogError
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import FileRef, Hold, Manifest, Segment, combine, new_id, side_files
from compaction_assets.log.ranking import (rank_columns, spark_loses, spark_order, spark_order_number,
                                             with_spark_ranks)
from compaction_assets.log.reader import offset_bucket, read_segments, remembered_df, segment_index
from compaction_assets.log.segment_stats import dead_offsets
from compaction_assets.log.writer import write_df
from compaction_assets.log.records import INT64_MAX
from compaction_assets.log.store import LogHandle

REWRITE_DEAD_FRACTION = 0.5      # a segment is rewritten once this share of its rows is dead
SMALL_RANGE_RECORDS = 60_000     # a range of at most this many rows is decided in one Spark partition
ROWS_PER_PARTITION = 100_000     # a larger one in one partition per this many rows, up to the session's
ROWS_PER_APPLY_TASK = 250_000    # the write job: a task per this many rows of the segments it reads
DRIVER_REWRITE_MAX_ROWS = 100_000   # writes reading up to this many rows to rewrite (and
DRIVER_MARK_MAX_ROWS = 2_000_000     # this many to mark) run in this process, not in Python workers
KEY_SAMPLE_ROWS = 50_000         # keys read (a few files, on the driver) to judge a partial aggregation
KEY_SAMPLE_MAX_FILES = 4
DISTINCT_SKIPS_PARTIAL = 0.85    # a sample at least this distinct: the group-by shuffles rows as they are
INCREMENTAL_MAX_DIRTY_SHARE = 0.5   # a range whose rows above the deduplicated prefix are at most this
INCREMENTAL_MAX_DIRTY_ROWS = 2_000_000   # share (and this many) groups only the keys they touch
INCREMENTAL_MIN_ROWS = 5_000_000   # ... in a range of at least this many rows: below, grouping every key
                                   # is faster (0.6M rows after 1% new: 2.8-3.2 s against 3.5-4.2 s warm)
COLLECT_DECISION_MAX_ROWS = 1_000_000   # a range of at most this many rows brings its decision (narrow, a
                                        # row a key) to this process in one job: no cache, no second job
COLLECT_OFFSET_DECISION_MAX_ROWS = 5_000_000   # the same for the offset strategy, whose decision has no key:
                                               # at most a winner a row, about 140 bytes each at the peak
                                               # (5M distinct keys: 0.4 GB more than caching it in Spark)
PROBE_MAX_NEWER_ROWS = 1_000_000   # the offset strategy probes the deduplicated prefix (probe_task.py) when
                                   # at most this many newer rows lie above it: their winners come here
                                   # with their keys (a cleaning after 1% new of 5M records: 1.6 s -> 0.5 s)
LOCAL_MASTER_WRITES_HERE = True   # a local master's large writes run in this process, a thread a core
LOCAL_WRITE_MAX_KEPT = 20_000_000  # ... when their kept offsets (12 bytes each here) are at most this many
DEAD_VECTOR_MAX_FILES = 8        # a cleaning adds its entries to the vector as a new file up to this many
WINNER_FIELDS = ("tomb", "delete_horizon", "size", "timestamp")   # a winner's columns besides key and offset


@dataclass
class Decision:
    """The outcome of the decide phase, before anything is written."""
    per_segment: dict[int, dict]
    horizons: dict[int, list[tuple[int, int, int, int]]]
    stats: dict
    decided: object            # Spark DataFrame of the winners with decisions: all of them (cached), or
                               # when the decision was collected (`kept` is set) only the tombstones,
                               # and None for the offset strategy (no later step reads them)
    new_horizon: int
    only_touched_keys: bool = False   # the group-by saw only keys that rows above the unique prefix touch
    kept: object = None        # a collected decision: pyarrow table (offset, seg_idx) of the kept winners
    drop_segments: frozenset = frozenset()   # segments whose rows in `kept` are the removed ones instead

    def release(self) -> None:
        """Drop the cached winners (a collected decision has none)."""
        if self.kept is None:
            self.decided.unpersist()


@dataclass
class CleanOutput:
    segments: tuple[Segment, ...]          # replaces the first `replaced` segments of the snapshot
    replaced: tuple[str, ...]
    stats: dict
    holds: tuple[Hold, ...] = ()
    remembered: dict | None = None
    tombstone_index: dict | None = None
    deleted: dict | None = None
    files_rewritten: int = 0
    extra: dict = field(default_factory=dict)


def decide(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, first_uncleanable: int, now: int,
           vector=None) -> Decision:
    """Per key of the range, its winner and what happens to it; per segment, what the cleaning leaves.
    `vector()`, when given, returns the log's deletion vector as `dead_offsets` reads it (a cleaning
    reads it once for the decision and the write).

    Only winners can be kept, so the decision is a group-by over narrow rows (partial aggregation keeps
    the shuffle to about one row per key and task); what a segment read comes from the manifest. Below
    the offset under which the last cleaning left one record per key, a key that no newer record of the
    range touches is its own winner: under the offset strategy (a newer record always wins) only the
    newer rows are grouped and the prefix is probed (`_decide_by_probe`); under the others, in a large
    range whose rest is small, only the touched keys are grouped (the newer rows and the older rows of
    their keys), so a cleaning after 1% of new records shuffles about 2% of the rows, not all of them
    (the clean section is read twice instead: in smaller ranges, shuffling it all is the faster).
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    ranks = rank_columns(config)
    guard = config.strategy != "offset"
    range_segs = list(enumerate(rewritten_segments(manifest, first_uncleanable)))  # a prefix of m.segments
    new_horizon = min(now + config.delete_retention_ms, INT64_MAX)

    def narrow_rows(segs):
        df = with_spark_ranks(read_segments(spark, handle, manifest, segs), config)
        return df.select("offset", "key", "timestamp", F.col("is_tombstone").alias("tomb"),
                         "delete_horizon", F.col("record_size").alias("size"), *ranks)

    rows = sum(s.physical_rows for _, s in range_segs)
    below = unique_keys_below(manifest)
    unique = [(i, s) for i, s in range_segs if below is not None and s.next_offset <= below]
    newer = range_segs[len(unique):]
    newer_rows = sum(s.physical_rows for _, s in newer)
    if (not guard and unique and newer and newer_rows <= INCREMENTAL_MAX_DIRTY_SHARE * rows
            and newer_rows <= min(INCREMENTAL_MAX_DIRTY_ROWS, PROBE_MAX_NEWER_ROWS)):
        vector = vector or (lambda: dead_offsets(handle, manifest))
        return _decide_by_probe(spark, handle, manifest, config, unique, newer, now, new_horizon, narrow_rows(newer),
                                vector())
    single = None
    if (rows >= INCREMENTAL_MIN_ROWS and unique and newer
            and newer_rows <= INCREMENTAL_MAX_DIRTY_SHARE * rows and newer_rows <= INCREMENTAL_MAX_DIRTY_ROWS):
        # the older rows of the touched keys meet the newer rows in the group-by; the others stay where
        # they are read (the deduplicated prefix is scanned twice, narrow columns only: cheaper than
        # shuffling it)
        old, new = narrow_rows(unique), narrow_rows(newer)
        touched = F.broadcast(new.select("key").distinct())
        single = old.join(touched, "key", "left_anti")
        narrow = old.join(touched, "key", "left_semi").unionByName(new)
        grouped_rows = 2 * newer_rows
    else:
        narrow = narrow_rows(range_segs)
        grouped_rows = rows
    winners = _winners(spark, handle, narrow, grouped_rows, newer if single is not None else range_segs, config)
    if single is not None:
        winners = single.select("key", *ranks, "offset", *WINNER_FIELDS).unionByName(winners)
    if rows <= COLLECT_OFFSET_DECISION_MAX_ROWS and not guard:
        # The offset strategy's decision depends on a winner's own row, `now` and its segment only: worked
        # out here from the collected winners, so that the Spark plan holds no value of this cleaning.
        # Spark compiles a plan with its literals in the code: with `now` and the segment bounds in it,
        # every cleaning compiled its own (about 0.25 s of an incremental cleaning on a warm server).
        table = _offset_decision(winners.select("offset", *WINNER_FIELDS).toArrow(), range_segs, now, new_horizon)
        per_segment, horizons, stats = _merge_figures(_arrow_figures(table), range_segs)
        return Decision(per_segment, horizons, stats, None, new_horizon, only_touched_keys=single is not None,
                        kept=table.filter(table.column("keep")).select(["offset", "seg_idx"]))

    rem = remembered_df(spark, handle, manifest) if guard else None
    if rem is not None:
        winners = winners.join(F.broadcast(rem.drop("m_expiry")) if manifest.remembered["count"] < 1_000_000
                               else rem.drop("m_expiry"), "key", "left")
        rem_beats = F.col("m_offset").isNotNull() & spark_loses(config, "", "m_")
    else:
        rem_beats = F.lit(False)

    outside = [(i, s) for i, s in enumerate(manifest.segments) if s.next_offset > first_uncleanable and s.records]
    if guard and outside:
        out = with_spark_ranks(read_segments(spark, handle, manifest, outside), config)
        out = out.select("key", F.col("offset").alias("o_offset"), *[F.col(c).alias("o_" + c) for c in ranks])
        tombs = winners.where(F.col("tomb")).select(
            "key", F.col("offset").alias("t_offset"), *[F.col(c).alias("t_" + c) for c in ranks])
        holds = (tombs.join(out, "key").where(spark_loses(config, "o_", "t_"))
                 .groupBy("t_offset").agg(F.max("o_offset").alias("until")))
        winners = winners.join(F.broadcast(holds), winners["offset"] == holds["t_offset"], "left").drop("t_offset")
        until = []
    else:
        until = [F.lit(None).cast("long").alias("until")]

    expired = F.col("tomb") & F.col("delete_horizon").isNotNull() & (F.lit(now) >= F.col("delete_horizon"))
    held = F.col("until").isNotNull() if guard else F.lit(False)
    alive = ~rem_beats
    # two projections, not a column at a time (each is analysed again: a fresh JVM spent half a second on
    # it), and `keep` once (its guard comparisons repeated in every column made the plan many times
    # slower to optimise); the segment of each winner from its offset: one row per key, not every record
    decided = winners.select("*", *until, segment_index(range_segs).alias("seg_idx"),
                             (alive & expired & ~held).alias("removed_tomb"), (alive & ~(expired & ~held)).alias("keep"))
    # the cache holds every winner: the key only where later steps read it (tombstones: the index and
    # the remembered deletes), since the cache tries a dictionary for every batch of 500k distinct keys
    # (one projection that replaces the key: naming the other columns would ask a Connect server for them)
    decided = decided.withColumns({
        "key": F.when(F.col("tomb"), F.col("key")),
        "stamped": F.col("keep") & F.col("tomb") & F.col("delete_horizon").isNull(),
        "new_horizon": F.when(F.col("keep") & F.col("tomb"), F.coalesce(F.col("delete_horizon"), F.lit(new_horizon))),
    })
    kept = None
    if rows <= COLLECT_DECISION_MAX_ROWS:
        # One job brings the winners here (about 40 bytes each): the figures are summed with Arrow, the
        # write takes its kept offsets from the same table, and the guard's outputs, which read the
        # winners again, get only the tombstones. Caching the winners instead cost a request of half a
        # second to a Connect server, the cache's build and a second job for the kept offsets.
        table = decided.select(*DECISION_COLUMNS, *ranks).toArrow()
        figures = _arrow_figures(table)
        kept = table.filter(table.column("keep")).select(["offset", "seg_idx"])
        tombs = table.filter(table.column("tomb"))
        decided = spark.createDataFrame(tombs if len(tombs) else table.slice(0, 0))
    else:
        decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
        figures = _spark_figures(decided)
    per_segment, horizons, stats = _merge_figures(figures, range_segs)
    return Decision(per_segment, horizons, stats, decided, new_horizon, only_touched_keys=single is not None,
                    kept=kept)


def _winners(spark, handle: LogHandle, narrow, grouped_rows: int, sample: list[tuple[int, Segment]],
             config: TopicConfig):
    """Spark: per key of `narrow` (about `grouped_rows` rows, read from the segments `sample`), its
    winner's rank columns, offset and WINNER_FIELDS."""
    from pyspark.sql import functions as F

    parts = 1 if grouped_rows <= SMALL_RANGE_RECORDS else max(2, -(-grouped_rows // ROWS_PER_PARTITION))
    if parts < _shuffle_partitions(spark):
        # A small range in the session's shuffle partitions (8) is mostly task overhead (17 tasks for a
        # 2,000-record log): as many partitions as its size needs, hashed before the group-by (which then
        # needs no other exchange); shuffling every narrow row costs little at this size, and a
        # partial aggregation would barely reduce rows whose keys are mostly distinct.
        narrow = narrow.repartition(parts, "key")
    elif keys_mostly_distinct(handle, sample):
        # A partial aggregation before the shuffle cannot reduce keys that barely repeat inside a task
        # (5M records over 500k keys: 4.3M of 5M rows left) and costs a hash aggregation of every row:
        # hashed by key as they are read, the rows meet one aggregation (5M records: 2.5 s of 10 saved).
        narrow = narrow.repartition(_shuffle_partitions(spark), "key")
    ranks = rank_columns(config)
    if ranks:
        # the order as one number, not a struct: fixed-width buffers keep this a hash aggregation (5M
        # records, timestamp strategy: the group-by 14.6 s -> 10.7 s warm)
        narrow = narrow.withColumn("_order", spark_order_number(config))
        return narrow.groupBy("key").agg(*[F.max_by(c, "_order").alias(c) for c in (*ranks, "offset", *WINNER_FIELDS)])
    # fixed-width buffers keep this a hash aggregation (a struct buffer forces a sort)
    return narrow.groupBy("key").agg(F.max("offset").alias("offset"),
                                     *[F.max_by(c, "offset").alias(c) for c in WINNER_FIELDS])


def _decide_by_probe(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig,
                     unique: list[tuple[int, Segment]], newer: list[tuple[int, Segment]], now: int, new_horizon: int,
                     narrow, vector) -> Decision:
    """The offset strategy's decision when a deduplicated prefix lies below a few newer segments: the
    newer rows grouped by Spark (their winners collected with their keys), the prefix probed segment by
    segment for the records those keys supersede (probe_task.py), without a shuffle of its rows."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    query = _winners(spark, handle, narrow, sum(s.physical_rows for _, s in newer), newer,
                     config).select("key", "offset", *WINNER_FIELDS)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="newer") as pool:
        # the server runs the newer rows' query while this process's probe reads its first files
        # (its threads wait for the keys only to test them)
        winners = pool.submit(query.toArrow)

        @functools.cache
        def touched():
            return winners.result().column("key").combine_chunks().cast(pa.binary())   # a row a key: its winner
        probed = _probe(spark, handle, manifest, unique, touched, now, new_horizon, vector)
        table = winners.result()
    table = _offset_decision(table.drop_columns(["key"]), newer, now, new_horizon)
    per_segment, horizons = _segment_figures(_arrow_figures(table), newer)
    removed = []
    for i, seg in unique:
        if not seg.records:
            continue
        found, figures = probed[i]
        if figures["kept"] + figures["removed"] != seg.records:
            raise CorruptLogError(
                f"log {handle.name!r}: segment [{seg.base_offset}, {seg.next_offset}) holds "
                f"{figures['kept'] + figures['removed']} visible records, its metadata says {seg.records}: "
                "its files and the manifest disagree")
        if figures["horizons"]:
            horizons[i] = [tuple(h) for h in figures["horizons"]]
        per_segment[i] = {"physical": seg.physical_rows, "read": seg.records, "bytes_read": seg.size,
                          **{k: v for k, v in figures.items() if k not in ("horizons", "removed")},
                          "unchanged": not len(found)}
        removed.append(pa.table({"offset": pa.array(found, pa.int64()),
                                 "seg_idx": pa.array([i] * len(found), pa.int32())}))
    kept = table.filter(table.column("keep")).select(["offset", "seg_idx"])
    kept = pa.concat_tables([kept.cast(pa.schema([("offset", pa.int64()), ("seg_idx", pa.int32())])), *removed])
    return Decision(per_segment, horizons, _totals(per_segment), None, new_horizon, only_touched_keys=True,
                    kept=kept, drop_segments=frozenset(i for i, _ in unique))


def _probe(spark, handle: LogHandle, manifest: Manifest, unique: list[tuple[int, Segment]], touched, now: int,
           new_horizon: int, vector) -> dict[int, tuple[object, dict]]:
    """probe_task over the segments `unique`, in this process's threads or in one Spark job of Python
    workers (as the write chooses); per segment index, (removed offsets ascending, figures). `touched()`
    gives the newer records' keys (threads call it once they have read their first files); `vector` is
    the log's deletion vector (`dead_offsets`)."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pyarrow as pa
    from pyspark import cloudpickle

    from compaction_assets.cleaning import probe_task
    from compaction_assets.log import segment_task

    old = vector.to_numpy() if vector is not None else None
    specs = [probe_task.ProbeSpec(i, tuple((handle.path(f.name), f.stamp) for f in seg.files),
                                  manifest.log_start_offset, _entries_in(old, seg), seg.physical_rows)
             for i, seg in unique if seg.records]
    threads = _probe_threads(spark, sum(spec.rows for spec in specs))
    n_tasks = max(1, min(len(specs), threads or _parallelism(spark) * 2))
    # each task's segments in offset order (a batch of neighbours shares its reads' locality)
    tasks = [sorted(group, key=lambda spec: spec.seg_idx)
             for group in _spread(specs, [spec.rows for spec in specs], n_tasks)]
    open_fs = functools.partial(segment_task.open_filesystem, handle.st.filesystem_spec())
    cloudpickle.register_pickle_by_value(probe_task)
    cloudpickle.register_pickle_by_value(segment_task)
    runner = probe_task.probe_runner(tasks, touched if threads else touched(), now, new_horizon, open_fs)
    if threads:
        def run(task: int) -> list:
            return list(runner(iter([pa.record_batch([pa.array([task], pa.int64())], names=["id"])])))
        with ThreadPoolExecutor(max_workers=n_tasks, thread_name_prefix="probe") as pool:
            result = pa.Table.from_batches([b for part in pool.map(run, range(n_tasks)) for b in part],
                                           schema=pa.schema([("seg_idx", pa.int32()), ("offset", pa.int64()),
                                                             ("figures", pa.string())]))
    else:
        result = spark.range(0, n_tasks, 1, n_tasks).mapInArrow(runner, probe_task.RESULT_SCHEMA).toArrow()
    seg_idx = result.column("seg_idx").to_numpy()
    offsets = result.column("offset")
    found = offsets.is_valid().to_numpy(zero_copy_only=False)
    # the removed offsets by segment, ascending in each: one sort, then a slice a segment
    owner, removed = seg_idx[found], offsets.fill_null(0).to_numpy()[found]
    order = np.lexsort((removed, owner))
    owner, removed = owner[order], removed[order]
    out: dict[int, tuple[object, dict]] = {}
    for i, text in zip(seg_idx[~found].tolist(), result.column("figures").filter(offsets.is_null()).to_pylist()):
        lo, hi = np.searchsorted(owner, [i, i + 1])
        out[int(i)] = (removed[lo:hi], json.loads(text))
    return out


def _entries_in(vector, seg: Segment):
    """The entries of `seg` in a deletion vector (numpy, ascending, or None): a slice, or None."""
    if vector is None:
        return None
    lo, hi = np.searchsorted(vector, [seg.base_offset, seg.next_offset])
    return vector[lo:hi] if hi > lo else None


# what the later steps read of a decision (with the strategy's rank columns)
DECISION_COLUMNS = ("key", "offset", "timestamp", "tomb", "size", "until", "seg_idx", "removed_tomb", "keep",
                    "stamped", "new_horizon")


def _offset_decision(winners, range_segs: list[tuple[int, Segment]], now: int, new_horizon: int):
    """The offset strategy's decision columns of collected winners (offset, timestamp, tomb,
    delete_horizon, size), with Arrow: as `decide`'s Spark projection computes them when nothing is
    remembered or held (that strategy has no resurrection guard)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tomb, horizon = winners.column("tomb"), winners.column("delete_horizon")
    expired = pc.and_(tomb, pc.fill_null(pc.greater_equal(pa.scalar(now, pa.int64()), horizon), False))
    keep = pc.invert(expired)
    kept_tomb = pc.and_(keep, tomb)
    seg_idx = _bucket_labels([(i, seg.base_offset) for i, seg in range_segs], winners.column("offset").to_numpy())
    return winners.append_column("seg_idx", pa.array(seg_idx, pa.int32())).append_column(
        "removed_tomb", expired).append_column("keep", keep).append_column(
        "stamped", pc.and_(kept_tomb, pc.is_null(horizon))).append_column(
        "new_horizon", pc.if_else(kept_tomb, pc.coalesce(horizon, pa.scalar(new_horizon, pa.int64())),
                                  pa.scalar(None, pa.int64())))


def _spark_figures(decided) -> list:
    """The figures of a cached decision by segment and kept-tombstone horizon (`hkey`, null for other
    records; merged per segment by `_merge_figures`), aggregated by Spark in one job."""
    from pyspark.sql import functions as F

    keep = F.col("keep")
    hkey = F.when(keep & F.col("tomb"), F.col("new_horizon")).alias("hkey")
    return decided.groupBy("seg_idx", hkey).agg(
        F.sum(keep.cast("long")).alias("kept"), F.sum(F.when(keep, F.col("size"))).alias("kept_bytes"),
        F.min(F.when(keep, F.col("timestamp"))).alias("min_ts"),
        F.max(F.when(keep, F.col("timestamp"))).alias("max_ts"),
        # fixed-width buffers keep this a hash aggregation (a struct's minimum forced a sort)
        F.min(F.when(keep, F.col("offset"))).alias("first_offset"),
        F.min_by(F.when(keep, F.col("timestamp")), F.when(keep, F.col("offset"))).alias("first_ts"),
        F.min(F.when(keep & (F.col("timestamp") > 0), F.col("timestamp"))).alias("min_pos_ts"),
        F.sum((keep & F.col("tomb")).cast("long")).alias("tombstones"),
        F.sum(F.col("stamped").cast("long")).alias("stamped"),
        F.sum(F.col("removed_tomb").cast("long")).alias("removed_tomb"),
        F.min(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_lo"),
        F.max(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_hi"),
        F.sum(F.when(F.col("removed_tomb"), F.col("size"))).alias("removed_bytes"),
    ).collect()


def _arrow_figures(table) -> list[dict]:
    """The figures of a collected decision by segment and kept-tombstone horizon, as `_spark_figures`
    computes them, with Arrow."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keep, tomb, ts, off, size = (table.column(c) for c in ("keep", "tomb", "timestamp", "offset", "size"))
    kept_tomb = pc.and_(keep, tomb)
    removed = table.column("removed_tomb")

    def where(cond, values):
        return pc.if_else(cond, values, pa.scalar(None, values.type))
    t = pa.table({
        "seg_idx": table.column("seg_idx"), "hkey": where(kept_tomb, table.column("new_horizon")),
        "kept": pc.cast(keep, pa.int64()), "kept_bytes": where(keep, size), "ts": where(keep, ts),
        "pos_ts": where(pc.and_(keep, pc.greater(ts, 0)), ts), "kept_offset": where(keep, off),
        "tombstones": pc.cast(kept_tomb, pa.int64()), "stamped": pc.cast(table.column("stamped"), pa.int64()),
        "removed_tomb": pc.cast(removed, pa.int64()), "removed_bytes": where(removed, size),
        "tomb_offset": where(kept_tomb, off)})
    out = t.group_by(["seg_idx", "hkey"]).aggregate([
        ("kept", "sum"), ("kept_bytes", "sum"), ("ts", "min"), ("ts", "max"), ("kept_offset", "min"),
        ("pos_ts", "min"), ("tombstones", "sum"), ("stamped", "sum"), ("removed_tomb", "sum"),
        ("removed_bytes", "sum"), ("tomb_offset", "min"), ("tomb_offset", "max")])
    names = {"kept_sum": "kept", "kept_bytes_sum": "kept_bytes", "ts_min": "min_ts", "ts_max": "max_ts",
             "kept_offset_min": "first_offset", "pos_ts_min": "min_pos_ts", "tombstones_sum": "tombstones",
             "stamped_sum": "stamped", "removed_tomb_sum": "removed_tomb", "removed_bytes_sum": "removed_bytes",
             "tomb_offset_min": "tomb_lo", "tomb_offset_max": "tomb_hi"}
    out = out.rename_columns([names.get(c, c) for c in out.column_names])
    # a group's first kept timestamp: the row of its lowest kept offset (offsets are unique), found by
    # a hash lookup of those few offsets rather than by sorting every row
    at = pc.index_in(out.column("first_offset"), value_set=off)
    return out.append_column("first_ts", pc.take(ts, at)).to_pylist()


def _merge_figures(figures: list, range_segs: list[tuple[int, Segment]]) -> tuple[dict, dict, dict]:
    """Per segment (and its kept tombstones' horizons) from the figures by (seg_idx, hkey); the totals."""
    per_segment, horizons = _segment_figures(figures, range_segs)
    return per_segment, horizons, _totals(per_segment)


def _segment_figures(figures: list, range_segs: list[tuple[int, Segment]]) -> tuple[dict, dict]:
    """Per segment (and its kept tombstones' horizons) from the figures by (seg_idx, hkey)."""
    per_segment: dict[int, dict] = {
        i: {"physical": s.physical_rows, "read": s.records, "bytes_read": s.size, "kept": 0, "kept_bytes": 0,
            "min_ts": None, "max_ts": None, "first": None, "min_pos_ts": None, "tombstones": 0, "stamped": 0,
            "removed_tomb": 0, "removed_bytes": 0}
        for i, s in range_segs if s.records}
    horizons: dict[int, list[tuple[int, int, int, int]]] = {}
    for r in figures:
        idx = r["seg_idx"]
        if r["hkey"] is not None:
            horizons.setdefault(idx, []).append((int(r["hkey"]), int(r["tombstones"]), int(r["tomb_lo"]),
                                                 int(r["tomb_hi"])))
        cur = per_segment[idx]
        for name in ("kept", "kept_bytes", "tombstones", "stamped", "removed_tomb", "removed_bytes"):
            cur[name] += int(r[name] or 0)
        for name, pick in (("min_ts", min), ("max_ts", max), ("min_pos_ts", min), ("first", min)):
            val = r[name] if name != "first" else (
                None if r["first_offset"] is None else (r["first_offset"], r["first_ts"]))
            if val is not None:
                cur[name] = val if cur[name] is None else pick(cur[name], val)
    for cur in per_segment.values():
        first = cur.pop("first")
        cur["first_ts"] = first[1] if first is not None else None
    return per_segment, horizons


def _totals(per_segment: dict[int, dict]) -> dict:
    """A cleaning's totals (records read, written, removed; bytes) from its figures per segment."""
    def total(name):
        return int(sum((p[name] or 0) for p in per_segment.values()))
    stats = {"records_read": total("read"), "records_written": total("kept"),
             "tombstones_stamped": total("stamped"), "tombstones_removed": total("removed_tomb"),
             "bytes_read": total("bytes_read"), "bytes_written": total("kept_bytes")}
    stats["records_superseded"] = stats["records_read"] - stats["records_written"] - stats["tombstones_removed"]
    stats["cleaner_recopy_percent"] = (100.0 * stats["bytes_written"] / stats["bytes_read"]
                                       if stats["bytes_read"] else 0.0)
    return stats


def keys_mostly_distinct(handle: LogHandle, segments: list[tuple[int, Segment]]) -> bool:
    """Whether a sample of the keys (up to KEY_SAMPLE_ROWS, from files in the middle of `segments`, read
    on the driver) is at least DISTINCT_SKIPS_PARTIAL distinct: then a partial aggregation is wasted."""
    import pyarrow as pa
    import pyarrow.compute as pc

    files = [ref for _, seg in segments for ref in seg.files]
    start = max(0, len(files) // 2 - KEY_SAMPLE_MAX_FILES // 2)
    chunks, rows = [], 0
    for ref in files[start:start + KEY_SAMPLE_MAX_FILES]:
        if rows >= KEY_SAMPLE_ROWS:
            break
        column = handle.st.read_parquet(handle.path(ref.name), columns=["key"]).column("key")
        column = column.slice(0, KEY_SAMPLE_ROWS - rows)
        chunks.extend(column.chunks)
        rows += len(column)
    if not rows:
        return False
    return len(pc.unique(pa.chunked_array(chunks))) >= DISTINCT_SKIPS_PARTIAL * rows


def merge_groups(sizes: list[int], segment_bytes: int) -> list[list[int]]:
    """Greedy merge in order: a segment joins the group before it while the total stays <= segment.bytes;
    the groups as lists of indices into `sizes`."""
    groups: list[list[int]] = []
    total = 0
    for i, size in enumerate(sizes):
        if groups and total + size <= segment_bytes:
            groups[-1].append(i)
            total += size
        else:
            groups.append([i])
            total = size
    return groups


def merge_layout(segments: list[Segment], segment_bytes: int) -> list[Segment]:
    """The segments merged as `merge_groups` groups them (SPEC §6)."""
    return [segments[g[0]] if len(g) == 1 else combine([segments[i] for i in g])
            for g in merge_groups([s.size for s in segments], segment_bytes)]


def rewrite_runs(groups: list[list[int]], rewrite: list[int], empty: set[int]) -> list[list[int]]:
    """The rewritten segments cut into runs that become one file each: consecutive members of one merge
    group (segments left empty between them do not cut a run, having nothing to write)."""
    chosen = set(rewrite)
    runs: list[list[int]] = []
    for group in groups:
        current: list[int] = []
        for i in group:
            if i in chosen:
                current.append(i)
            elif i not in empty and current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
    return runs


def _empty_stats() -> dict:
    return {"records_read": 0, "records_written": 0, "tombstones_stamped": 0, "tombstones_removed": 0,
            "records_superseded": 0, "bytes_read": 0, "bytes_written": 0, "cleaner_recopy_percent": 0.0,
            "segments_rewritten": 0, "segments_marked": 0, "records_rewritten": 0, "files_bytes_written": 0,
            "deletion_vector_records": 0}


def rewrite_plan(decision: Decision) -> tuple[list[int], list[int]]:
    """Segments to rewrite (enough of them dead) and segments that only get deletion-vector entries."""
    rewrite, mark = [], []
    for i, p in sorted(decision.per_segment.items()):
        if p["kept"] == p["physical"] or p["kept"] == 0 or p.get("unchanged"):
            continue  # untouched (a probed segment that loses nothing keeps its vector entries too), or
                      # left with no file at all
        if (p["physical"] - p["kept"]) >= REWRITE_DEAD_FRACTION * p["physical"]:
            rewrite.append(i)
        else:
            mark.append(i)
    return rewrite, mark


def _shuffle_partitions(spark) -> int:
    try:
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    except Exception:  # a conf the session refuses to show: its default
        return 8


def _parallelism(spark) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect: no SparkContext
        return _shuffle_partitions(spark)


@dataclass
class Applied:
    """What the write job of a cleaning wrote: runs' new files and the new deletion vector."""
    written: dict[int, tuple[FileRef, int]]      # run index -> (its new file, bytes)
    deleted: dict | None                          # {"file", "count"} of the new deletion vector, or None


def _apply(spark, handle: LogHandle, m: Manifest, d: Decision, range_segs: list[Segment], runs: list[list[int]],
           mark: list[int], work_dir: str, old) -> Applied:
    """One Spark job writes what the decision changed: runs of segments rewritten in Python workers (one
    file a run), and the offsets that segments kept as they are lose, as parts of the new deletion vector.
    Only the kept offsets of those segments are shuffled (to the task of their unit); full records never are.

    The vector grows by a file of this cleaning's new entries (written in proportion to the change), and
    is rebuilt whole when it has DEAD_VECTOR_MAX_FILES files or more than half its entries are stale
    (of segments since rewritten, emptied or below the log start)."""
    from pyspark import cloudpickle
    from pyspark.sql import functions as F

    from compaction_assets.cleaning import rewrite_task
    from compaction_assets.log import segment_task
    from compaction_assets.log.records import SEGMENT_SCHEMA

    import pyarrow as pa

    range_end = range_segs[-1].next_offset
    dead_folder = f"side/deleted-{uuid.uuid4().hex}"
    written: dict[int, tuple[FileRef, int]] = {}
    count = 0
    st = handle.st
    old_files = side_files(m.deleted)
    # segments of the range that keep their files and their entries untouched (probed, nothing removed)
    carried = [i for i, p in d.per_segment.items() if p.get("unchanged")]
    # the old entries still in force after this cleaning: those of segments kept as they are
    useful = (sum(s.dead for s in m.segments if s.base_offset >= range_end)
              + sum(range_segs[i].dead for i in (*mark, *carried)))
    stale = (len(old) if old is not None else 0) - useful
    add = old is not None and len(old_files) < DEAD_VECTOR_MAX_FILES and stale <= useful
    old_all = old.to_numpy() if old is not None else None   # ascending (dead_offsets)

    def entries_of(seg: Segment):
        return _entries_in(old_all, seg)

    def known_dead(seg: Segment):
        return entries_of(seg) if add else None

    def dropped(run: list[int]):
        parts = [e for i in run if i in d.drop_segments and (e := entries_of(range_segs[i])) is not None]
        return np.concatenate(parts) if parts else None
    if runs or mark:
        # units: runs first (label = run index), then the marked segments; each is a contiguous offset range
        rewrites = {r: rewrite_task.RewriteSpec(
            unit=r, files=tuple((handle.path(f.name), f.stamp) for i in run for f in range_segs[i].files),
            min_offset=m.log_start_offset, horizon=d.new_horizon,
            out=handle.path(f"{work_dir}/run-{run[0]}-{run[-1]}.parquet"),
            drop=tuple(i in d.drop_segments for i in run for _ in range_segs[i].files), dead=dropped(run))
            for r, run in enumerate(runs)}
        marks = {len(runs) + k: rewrite_task.MarkSpec(
            unit=len(runs) + k, files=tuple(handle.path(f.name) for f in range_segs[i].files),
            min_offset=m.log_start_offset, known_dead=known_dead(range_segs[i]), drop=i in d.drop_segments,
            carry=None if add or i not in d.drop_segments else entries_of(range_segs[i]))
            for k, i in enumerate(mark)}
        starts = ([(r, range_segs[run[0]].base_offset) for r, run in enumerate(runs)]
                  + [(len(runs) + k, range_segs[i].base_offset) for k, i in enumerate(mark)])
        members = [i for run in runs for i in run] + list(mark)
        st.makedirs(handle.path(work_dir))          # local files only: object stores have no folders
        if mark:
            st.makedirs(handle.path(dead_folder))
        # the workers open the store as their reads do: the driver's settings travel with the task
        open_fs = functools.partial(segment_task.open_filesystem, st.filesystem_spec())
        cloudpickle.register_pickle_by_value(rewrite_task)
        cloudpickle.register_pickle_by_value(segment_task)
        runner = rewrite_task.apply_runner(rewrites, marks, open_fs, SEGMENT_SCHEMA, handle.path(dead_folder))
        if d.kept is not None:  # a collected decision: the kept offsets are here already
            kept_here = _units_of(d.kept, members, starts)
            kept = None
        else:
            # one SQL expression: a literal column per member is a call into the JVM each (553: half a second)
            kept = (d.decided.where(F.col("keep") & F.expr(f"seg_idx IN ({', '.join(map(str, members))})"))
                    .select(offset_bucket(starts).alias("unit"), "offset"))
            kept_here = None
        # the rows each unit reads (runs first, then the marked segments, as the labels above; a probed
        # segment's mark reads none)
        unit_rows = {**{r: sum(range_segs[i].physical_rows for i in run) for r, run in enumerate(runs)},
                     **{len(runs) + k: 0 if i in d.drop_segments else range_segs[i].physical_rows
                        for k, i in enumerate(mark)}}
        rewrite_rows = sum(unit_rows[r] for r in range(len(runs)))
        mark_rows = sum(unit_rows.values()) - rewrite_rows
        threads = _write_threads(spark, rewrite_rows, mark_rows, int(d.stats["records_written"]))
        if threads:
            # The same runner in this process over the collected kept offsets: when there is little to
            # read (an incremental cleaning, a small log: no Python worker starts, and a Spark Connect
            # server starts new ones for every client session, about a second), or when the master is
            # local (its workers would be these cores, plus a process start each and a copy of the kept
            # offsets through the JVM: a forced cleaning of 5M records wrote in 2.0 s here, 4.3 s there).
            table = kept_here if kept_here is not None else kept.toArrow()
            results = _run_here(runner, table, unit_rows, threads)
        else:
            if kept is None:
                kept = spark.createDataFrame(kept_here)
            # about two tasks a core, so that uneven units still spread over the cores, but no more than
            # the rows to read call for: each task starts a worker's work and writes its own vector part
            work = rewrite_rows + mark_rows
            tasks = max(1, min(len(rewrites) + len(marks), _parallelism(spark) * 2,
                               -(-work // ROWS_PER_APPLY_TASK)))
            results = kept.repartition(tasks, "unit").mapInArrow(runner, rewrite_task.RESULT_SCHEMA).collect()
        prefix = handle.path("")
        for r in results:
            rel = r["path"][len(prefix):].lstrip("/") if r["path"].startswith(prefix) else r["path"]
            if r["kind"] == rewrite_task.REWRITTEN:
                written[int(r["unit"])] = (FileRef(rel, int(r["records"])), int(r["bytes"]))
            else:
                count += int(r["records"])
    if add:  # the old files stay as they are; this cleaning's entries (if any) are one more
        files = old_files + ([dead_folder] if count else [])
        return Applied(written, {"files": files, "count": m.deleted["count"] + count})
    # rebuilt: entries of the old vector above the range stay, as do those of the range's segments
    # carried as they are (the others' were written above); a small table read and written on the
    # driver, not another Spark job
    if old is not None:
        kept_entries = [e for i in sorted(carried) if (e := entries_of(range_segs[i])) is not None]
        above = np.concatenate([*kept_entries, old_all[np.searchsorted(old_all, range_end):]])
        if len(above):
            st.write_parquet(handle.path(f"{dead_folder}/part-{uuid.uuid4().hex}.parquet"),
                             pa.table({"offset": above}), **rewrite_task.DEAD_PART_OPTIONS)
            count += len(above)
    return Applied(written, {"files": [dead_folder], "count": count} if count else None)


def _probe_threads(spark, rows: int) -> int:
    """Threads of this process that probe a prefix of `rows` rows (0: Spark's Python workers do): a
    thread a core under a local master, as the write; elsewhere one when the rows are few."""
    if LOCAL_MASTER_WRITES_HERE and (cores := local_cores(spark)):
        return cores
    return 1 if rows <= DRIVER_MARK_MAX_ROWS else 0


def _write_threads(spark, rewrite_rows: int, mark_rows: int, kept: int) -> int:
    """Threads of this process that run a cleaning's write (0: Spark's Python workers run it instead)."""
    if rewrite_rows <= DRIVER_REWRITE_MAX_ROWS and mark_rows <= DRIVER_MARK_MAX_ROWS:
        return 1
    if not LOCAL_MASTER_WRITES_HERE or kept > LOCAL_WRITE_MAX_KEPT:
        return 0
    return local_cores(spark) or 0


def local_cores(spark) -> int | None:
    """The cores a local master runs tasks on (capped by this machine's), None for a cluster's master.

    Through Spark Connect the server's master is asked; a local server's tasks share a machine with its
    clients (scripts/spark-connect.sh starts one on 127.0.0.1)."""
    from compaction_assets.spark import local_master_cores

    try:
        master = spark.conf.get("spark.master") or ""
    except Exception:  # a session that does not show its master: treat it as a cluster
        return None
    return local_master_cores(master)


def _run_here(runner, table, unit_rows: dict[int, int], threads: int) -> list[dict]:
    """`runner` (the write job's task function) in this process over `table` (unit, offset), its units
    spread over `threads` threads by the rows they read (pyarrow and numpy release the GIL); each
    thread's share is one task's (so one part of the deletion vector each)."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import pyarrow as pa

    def run(part) -> list[dict]:
        return [r for batch in runner(iter(part.to_batches())) for r in batch.to_pylist()]
    groups = _spread(list(unit_rows), list(unit_rows.values()), max(1, min(threads, len(unit_rows))))
    if len(groups) == 1:
        return run(table)
    units = table.column("unit").to_numpy()
    # as in Spark, the runner sees only the units that have kept offsets (a share without any is empty)
    parts = [part for part in (table.filter(pa.array(np.isin(units, np.array(g, dtype=units.dtype))))
                               for g in groups) if len(part)]
    if len(parts) <= 1:
        return run(parts[0] if parts else table)
    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="write") as pool:
        return [r for rows in pool.map(run, parts) for r in rows]


def _spread(items: list, weights: list[int], n: int) -> list[list]:
    """`items` in `n` groups of about equal weight: the heaviest first, each onto the lightest group."""
    groups: list[list] = [[] for _ in range(n)]
    loads = [0] * n
    for item, weight in sorted(zip(items, weights), key=lambda pair: -pair[1]):
        at = loads.index(min(loads))
        groups[at].append(item)
        loads[at] += max(weight, 1)
    return groups


def _units_of(kept, members: list[int], starts: list[tuple[int, int]]):
    """The kept offsets (pyarrow table of offset, seg_idx) of the member segments with their write unit:
    the label of the last (label, first offset) pair at or below each offset (as `offset_bucket`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = kept.filter(pc.is_in(kept.column("seg_idx"), value_set=pa.array(members, kept.column("seg_idx").type)))
    unit = _bucket_labels(starts, rows.column("offset").to_numpy())
    return pa.table({"unit": pa.array(unit, pa.int32()), "offset": rows.column("offset")})


def _bucket_labels(starts: list[tuple[int, int]], offsets):
    """Numpy: the label of the last (label, first offset) pair at or below each offset, as
    `offset_bucket` computes it in Spark (every offset at or above the lowest first offset)."""
    import numpy as np

    pairs = sorted(starts, key=lambda pair: pair[1])
    firsts = np.array([first for _, first in pairs], dtype=np.int64)
    labels = np.array([label for label, _ in pairs], dtype=np.int32)
    return labels[np.searchsorted(firsts, offsets, side="right") - 1]


def clean(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, first_uncleanable: int, now: int,
          progress=None) -> CleanOutput:
    """Clean `m` (a snapshot) below `u` at `now`; write new files; return what the commit replaces."""
    started = time.monotonic()
    say = progress or (lambda msg: None)
    range_segs = rewritten_segments(manifest, first_uncleanable)
    if not range_segs:
        stats = {**_empty_stats(), "clean_time_secs": time.monotonic() - started}
        # nothing to rewrite: the guard's state carries over unchanged
        return CleanOutput((), (), stats, holds=manifest.holds, remembered=manifest.remembered,
                           tombstone_index=manifest.tombstone_index, deleted=manifest.deleted)
    say(f"deciding winners over {len(range_segs)} segment(s), offsets "
        f"[{range_segs[0].base_offset}, {first_uncleanable})")
    # the deletion vector, read once when a step needs it on the driver (the probe, the write)
    vector = functools.cache(lambda: dead_offsets(handle, manifest))
    d = decide(spark, handle, manifest, config, first_uncleanable, now, vector)
    try:
        rewrite, mark = rewrite_plan(d)
        work_dir = f"data/clean-{uuid.uuid4().hex}"
        # the merged layout is known before anything is written: rewritten neighbours share a file
        sizes = [int((d.per_segment.get(i) or {}).get("kept_bytes") or 0) for i in range(len(range_segs))]
        groups = merge_groups(sizes, config.segment_bytes)
        empty = {i for i in range(len(range_segs)) if not (d.per_segment.get(i) or {}).get("kept")}
        runs = rewrite_runs(groups, rewrite, empty)
        if rewrite or mark:
            say(f"rewriting {len(rewrite)} segment(s) into {len(runs)} file(s) and marking removed records "
                f"of {len(mark)}, of {len(range_segs)} segment(s)")
        applied = _apply(spark, handle, manifest, d, range_segs, runs, mark, work_dir, vector())
        deleted = applied.deleted
        run_of = {i: r for r, run in enumerate(runs) for i in run}
        new_segments = []
        for i, seg in enumerate(range_segs):
            p = d.per_segment.get(i)
            if p is None or p["kept"] == 0:  # no visible record left
                new_segments.append(Segment(new_id(), seg.base_offset, seg.next_offset))
                continue
            if i in run_of:  # the run's file, held by its first member (a run is inside one merge group)
                files = (applied.written[run_of[i]][0],) if runs[run_of[i]][0] == i else ()
            elif p["stamped"]:
                files = tuple(FileRef(f.name, f.records, f.stamp if f.stamp is not None else d.new_horizon)
                              for f in seg.files)
            else:
                files = seg.files
            new_segments.append(Segment(
                id=new_id(), base_offset=seg.base_offset, next_offset=seg.next_offset, files=files,
                records=int(p["kept"]), size=int(p["kept_bytes"] or 0), min_ts=p["min_ts"], max_ts=p["max_ts"],
                first_ts=p["first_ts"], min_pos_ts=p["min_pos_ts"], tombstones=int(p["tombstones"]),
                horizons=tuple(sorted(d.horizons.get(i, []))),
                dead=0 if i in run_of else int(p["physical"] - p["kept"])))
        merged = [new_segments[g[0]] if len(g) == 1 else combine([new_segments[i] for i in g]) for g in groups]
        stats = dict(d.stats)
        stats.update(segments_rewritten=len(run_of), segments_marked=len(mark),
                     records_rewritten=sum(ref.records for ref, _ in applied.written.values()),
                     files_bytes_written=sum(b for _, b in applied.written.values()),
                     deletion_vector_records=(deleted or {}).get("count", 0))
        out = CleanOutput(tuple(merged), tuple(s.id for s in range_segs), stats,
                          files_rewritten=len(applied.written), deleted=deleted)
        if config.strategy != "offset":
            say("updating the tombstone index and remembered deletes")
            _guard_outputs(spark, handle, manifest, config, d, now, out)
        out.stats["clean_time_secs"] = time.monotonic() - started
        return out
    finally:
        d.release()


def _guard_outputs(spark, handle: LogHandle, m: Manifest, config: TopicConfig, d: Decision, now: int,
                   out: CleanOutput) -> None:
    """Holds, the tombstone index and the remembered deletes (timestamp and header strategies)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ranks = rank_columns(config)
    decided = d.decided
    held = decided.where(F.col("keep") & F.col("tomb") & F.col("until").isNotNull()).select(
        "offset", "new_horizon", "until").collect()
    out.holds = tuple(Hold(int(r["offset"]), int(r["new_horizon"]), int(r["until"])) for r in held)

    kept_tombs = sum(int(p["tombstones"] or 0) for p in d.per_segment.values())
    if kept_tombs:
        name = f"side/tombstones-{uuid.uuid4().hex}"
        write_df(handle, decided.where(F.col("keep") & F.col("tomb"))
            .select("key", "offset", F.col("new_horizon").alias("horizon"), *ranks)
            .coalesce(1), name)
        out.tombstone_index = {"file": name, "count": kept_tombs}

    expiry = min(now + config.delete_retention_ms, INT64_MAX)
    new = decided.where(F.col("removed_tomb")).select(
        "key", *[F.col(c).alias("m_" + c) for c in ranks], F.col("offset").alias("m_offset"),
        F.lit(expiry).cast("long").alias("m_expiry"))
    old = remembered_df(spark, handle, m)
    removed = int(d.stats["tombstones_removed"])
    if not removed and old is None:
        return
    if not removed:
        out.remembered = m.remembered
        return
    both = new if old is None else new.unionByName(old)
    best = F.max(spark_order(config, "m_")).over(Window.partitionBy("key"))
    both = both.withColumn("_best", best).where(F.col("_best.offset") == F.col("m_offset")).drop("_best")
    name = f"side/remembered-{uuid.uuid4().hex}"
    write_df(handle, both.coalesce(1), name)
    # the figures from the written file itself (one small file, read here), not from another Spark job
    count, min_expiry = _file_count_and_min(handle, name, "m_expiry")
    out.remembered = {"file": name, "count": count, "min_expiry": min_expiry}


def _file_count_and_min(handle: LogHandle, folder: str, column: str) -> tuple[int, int]:
    """Rows and the minimum of `column` over the Parquet files written into `folder` (any store)."""
    import pyarrow.compute as pc

    st = handle.st
    count, low = 0, None
    for entry in st.list_dir(handle.path(folder)):
        if entry.endswith(".parquet") and not entry.startswith((".", "_")):
            col = st.read_parquet(handle.path(f"{folder}/{entry}"), columns=[column]).column(column)
            count += len(col)
            if len(col):
                m = pc.min(col).as_py()
                low = m if low is None else min(low, m)
    return count, int(low) if low is not None else 0
