"""Decide (SPEC §6): per key of the rewritten range its winner, and per segment what the cleaning keeps.

A narrow scan (key, offset, rank, tombstone flag, horizon) of the range picks the winner of every key,
applies the delete horizons, the resurrection guard and the remembered deletes, and aggregates per
segment (small results only reach the driver); a winner's segment is found from its offset after the
group-by, not for every record. Only winners can be kept, so the decision is a group-by over narrow rows
(partial aggregation keeps the shuffle to about one row per key and task). Where the decision is made:
in this process with Arrow and no group-by in Spark (the offset strategy's range under a local master,
when it fits: decide_here.py), collected here (a small range), in the group-by's tasks (the offset
strategy's large range: decide_task.py), or cached in Spark (the others').

Below the offset under which the last cleaning left one record per key, a key that no newer record of
the range touches is its own winner: under the offset strategy (a newer record always wins) only the
newer rows are grouped and the prefix is probed (probe.py); under the others, in a large range whose
rest is small, only the touched keys are grouped (the newer rows and the older rows of their keys), so a
cleaning after 1% of new records shuffles about 2% of the rows, not all of them.

Winners (`winners`, `narrow_rows`; SPEC §6): a group-by over narrow rows, in Spark, for the grouped
decision and the newer rows of a probed one. How the rows reach the group-by is chosen by size: one
partition for a small range, hashed by key when a sample of keys says a partial aggregation would not
reduce them, Spark's partial aggregation otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning import decide_task
from compaction_assets.cleaning.decide_here import decide_here, newer_keys, newer_winners
from compaction_assets.cleaning.decide_task import arrow_figures, kept_offsets, offset_decision
from compaction_assets.cleaning.decision import (
    DECISION_COLUMNS,
    OFFSETS_SCHEMA,
    CachedDecision,
    CollectedDecision,
    Decision,
    ProbedDecision,
    TaskDecision,
    segment_figures,
    spark_figures,
    totals,
)
from compaction_assets.cleaning.placement import (
    COLLECTED_WINNER,
    TASK_KEPT_OFFSET,
    decide_here_plan,
    fits_here,
    newer_winner,
    shuffle_partitions,
)
from compaction_assets.cleaning.probe import NewerKeys, probe, probed_figures
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.log.ranking import rank_columns, spark_loses, spark_order_number, with_spark_ranks
from compaction_assets.log.reader import ReadPaths, dead_offsets, read_segments, segment_index, ship_by_value
from compaction_assets.log.side_tables import remembered_df
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.arrays import from_numpy
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment
from compaction_assets.topics.config import Strategy, TopicConfig


def decide(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    vector=None,
    tuning: CleanerTuning = DEFAULT_TUNING,
) -> Decision:
    """Per key of the range (the planner's `span`) its winner and what happens to it; per segment what the
    cleaning leaves.

    `vector()`, when given, returns the log's deletion vector as `dead_offsets` reads it (a cleaning
    reads it once for the decision and the write)."""
    new_horizon = min(now + config.delete_retention_ms, INT64_MAX)
    offset_strategy = config.strategy == Strategy.OFFSET
    # read when the probe or a decision made here needs it, and once (the cleaner passes its own, cached)
    vector = vector or functools.cache(functools.partial(dead_offsets, handle, manifest))
    if (
        offset_strategy
        and _newer_are_few(span, tuning)
        and fits_here(
            spark,
            span.newer_rows,
            tuning.probe_max_newer_rows,
            newer_winner(_newer_record_bytes(span)),
            tuning.driver_memory_share,
            shipped=not (here := decide_here_plan(spark, span.newer_rows, tuning)).threads,
        )
    ):
        keys = None
        if here.threads:
            newer = functools.partial(newer_winners, handle, manifest, span.newer, vector, here.threads, here.buckets)
            keys = functools.partial(newer_keys, handle, manifest, span.newer, vector)
        else:
            newer = (
                winners(
                    spark,
                    handle,
                    narrow_rows(spark, handle, manifest, config, span.newer, tuning),
                    span.newer_rows,
                    span.newer,
                    config,
                    tuning,
                )
                .select("key", "offset", *WINNER_FIELDS)
                .toArrow
            )
        return _decide_by_probe(spark, handle, manifest, span, newer, now, new_horizon, vector(), tuning, keys)
    if offset_strategy and (here := decide_here_plan(spark, span.rows, tuning)).threads:
        return decide_here(handle, manifest, span, now, new_horizon, vector, here.threads, here.buckets)
    found, only_touched = _range_winners(spark, handle, manifest, config, span, tuning)
    if offset_strategy and _collects(spark, span, tuning.collect_offset_decision_max_rows, tuning):
        # The offset strategy's decision depends on a winner's own row, `now` and its segment only: worked
        # out here from the collected winners, so that the Spark plan holds no value of this cleaning.
        # Spark compiles a plan with its literals in the code: with `now` and the segment bounds in it,
        # every cleaning compiled its own (about 0.25 s of an incremental cleaning on a warm server).
        table = offset_decision(
            found.select("offset", *WINNER_FIELDS).toArrow(), _starts(span.segments), now, new_horizon
        )
        figures, horizons = segment_figures(arrow_figures(table), span.segments)
        return CollectedDecision(
            figures=figures,
            horizons=horizons,
            stats=totals(figures),
            new_horizon=new_horizon,
            only_touched_keys=only_touched,
            kept=kept_offsets(table),
        )
    if offset_strategy and fits_here(
        spark, span.rows, tuning.task_decision_max_rows, TASK_KEPT_OFFSET, tuning.driver_memory_share
    ):
        return _decided_in_tasks(found, span, now, new_horizon, only_touched)
    decided = decision_columns(spark, handle, manifest, config, found, span, now, new_horizon, tuning)
    if _collects(spark, span, tuning.collect_decision_max_rows, tuning):
        return _collected(spark, decided, config, span, new_horizon, only_touched)
    return _cached(decided, span, new_horizon, only_touched)


@contextmanager
def decided(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    vector,
    tuning: CleanerTuning,
) -> Iterator[Decision]:
    """`decide`, and what the decision holds in Spark dropped once the cleaning is done with it."""
    decision = decide(spark, handle, manifest, config, span, now, vector, tuning)
    try:
        yield decision
    finally:
        decision.release()


def _collects(spark, span: CleaningRange, max_rows: int, tuning: CleanerTuning) -> bool:
    """Whether the range's decision comes here in one job: up to `max_rows` rows (where collecting stops
    beating a cache in Spark: 20M rows collected took 425 s against 262-333 s cached) and only when a
    winner a row fits the memory available (placement.py), else it is cached in Spark."""
    return span.rows <= max_rows and fits_here(spark, span.rows, 0, COLLECTED_WINNER, tuning.driver_memory_share)


def _newer_are_few(span: CleaningRange, tuning: CleanerTuning, max_rows: int | None = None) -> bool:
    """Whether the newer rows are few enough (a share, and `max_rows` when given) to decide only what
    they touch."""
    return (
        bool(span.unique and span.newer)
        and (max_rows is None or span.newer_rows <= max_rows)
        and span.newer_rows <= tuning.incremental_max_dirty_share * span.rows
    )


def _newer_record_bytes(span: CleaningRange) -> int:
    """The newer segments' logical bytes a record (16 bytes, the key and the value): at most a key's."""
    records = sum(s.records for _, s in span.newer)
    return -(-sum(s.size for _, s in span.newer) // records) if records else 0


def _decide_by_probe(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    span: CleaningRange,
    query,
    now: int,
    new_horizon: int,
    vector,
    tuning: CleanerTuning,
    keys=None,
) -> ProbedDecision:
    """The decision of `span` (a planner.CleaningRange): its newer segments grouped (`query()`, their
    winners with key, offset and WINNER_FIELDS as an Arrow table: from Spark, or found here), its prefix
    probed (probe.py) against the newer records' keys (`keys()`, when given: read apart; else the
    winners')."""
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="newer") as pool:
        # the newer rows' winners are found while the probe runs: its threads test their rows as soon as
        # the newer keys are read (20M records after 1% new: one core sat idle for the 0.2-0.3 s the
        # winners took, the probe's threads waiting for the keys after their read-ahead); the newer files'
        # keys and offsets are then read twice, about 30 ms of CPU for 200k records
        newer = pool.submit(query)
        found_keys = pool.submit(keys) if keys is not None else newer

        def tested_keys():  # asked once (the probe's threads share the set built from them)
            if keys is not None:
                return found_keys.result()
            return newer.result().column("key").combine_chunks().cast(pa.binary())  # a row a key: its winner

        probed = probe(
            spark,
            handle,
            manifest,
            span.unique,
            NewerKeys(tested_keys, found_keys.done),
            now,
            new_horizon,
            vector,
            tuning,
        )
        table = newer.result()
    table = offset_decision(table.drop_columns(["key"]), _starts(span.newer), now, new_horizon)
    figures, horizons = segment_figures(arrow_figures(table), span.newer)
    removed = []
    for i, seg in span.unique:
        if not seg.records:
            continue
        found, seg_figures = probed[i]
        figures[i], seg_horizons = probed_figures(handle, seg, found, seg_figures)
        if seg_horizons:
            horizons[i] = seg_horizons
        removed.append(
            pa.table(
                {
                    "offset": from_numpy(found.astype(np.int64, copy=False)),
                    "seg_idx": from_numpy(np.full(len(found), i, np.int32)),
                }
            )
        )
    return ProbedDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=True,
        kept=kept_offsets(table).cast(OFFSETS_SCHEMA),
        removed=pa.concat_tables(removed) if removed else OFFSETS_SCHEMA.empty_table(),
        probed=frozenset(i for i, _ in span.unique),
    )


def _range_winners(
    spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, span: CleaningRange, tuning: CleanerTuning
):
    """Spark: the winner of every key of the range; whether only the touched keys were grouped."""
    from pyspark.sql import functions as F

    if span.rows >= tuning.incremental_min_rows and _newer_are_few(span, tuning, tuning.incremental_max_dirty_rows):
        # the older rows of the touched keys meet the newer rows in the group-by; the others stay where
        # they are read (the deduplicated prefix is scanned twice, narrow columns only: cheaper than
        # shuffling it)
        old, new = (narrow_rows(spark, handle, manifest, config, segs, tuning) for segs in (span.unique, span.newer))
        touched = F.broadcast(new.select("key").distinct())
        single = old.join(touched, "key", "left_anti")
        grouped = winners(
            spark,
            handle,
            old.join(touched, "key", "left_semi").unionByName(new),
            2 * span.newer_rows,
            span.newer,
            config,
            tuning,
        )
        return single.select("key", *rank_columns(config), "offset", *WINNER_FIELDS).unionByName(grouped), True
    narrow = narrow_rows(spark, handle, manifest, config, span.segments, tuning)
    return winners(spark, handle, narrow, span.rows, span.segments, config, tuning), False


def decision_columns(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    winners,
    span: CleaningRange,
    now: int,
    new_horizon: int,
    tuning: CleanerTuning,
):
    """Spark: the winners with DECISION_COLUMNS, after the remembered deletes and the holds (the guard of
    the timestamp and header strategies) have had their say."""
    from pyspark.sql import functions as F

    guard = config.strategy != Strategy.OFFSET
    winners, rem_beats = _remembered_beats(spark, handle, manifest, config, winners) if guard else (winners, None)
    winners, held = (
        _held(spark, handle, manifest, config, winners, span.first_uncleanable, tuning.reads)
        if guard
        else (winners, None)
    )
    until = [] if held is not None else [F.lit(None).cast("long").alias("until")]
    expired = F.col("tomb") & F.col("delete_horizon").isNotNull() & (F.lit(now) >= F.col("delete_horizon"))
    held = held if held is not None else F.lit(False)
    alive = ~rem_beats if rem_beats is not None else ~F.lit(False)
    # two projections, not a column at a time (each is analysed again: a fresh JVM spent half a second on
    # it), and `keep` once (its guard comparisons repeated in every column made the plan many times
    # slower to optimise); the segment of each winner from its offset: one row per key, not every record
    decided = winners.select(
        "*",
        *until,
        segment_index(span.segments).alias("seg_idx"),
        (alive & expired & ~held).alias("removed_tomb"),
        (alive & ~(expired & ~held)).alias("keep"),
    )
    # the cache holds every winner: the key only where later steps read it (tombstones: the index and
    # the remembered deletes), since the cache tries a dictionary for every batch of 500k distinct keys
    # (one projection that replaces the key: naming the other columns would ask a Connect server for them)
    return decided.withColumns(
        {
            "key": F.when(F.col("tomb"), F.col("key")),
            "stamped": F.col("keep") & F.col("tomb") & F.col("delete_horizon").isNull(),
            "new_horizon": F.when(
                F.col("keep") & F.col("tomb"), F.coalesce(F.col("delete_horizon"), F.lit(new_horizon))
            ),
        }
    )


def _decided_in_tasks(found, span: CleaningRange, now: int, new_horizon: int, only_touched: bool) -> TaskDecision:
    """The offset strategy's decision worked out in the tasks that group the winners (decide_task.py):
    one job, and only the figures and the kept offsets come here."""
    ship_by_value(decide_task)
    runner = decide_task.decision_runner(_starts(span.segments), now, new_horizon)
    result = found.select("offset", *WINNER_FIELDS).mapInArrow(runner, decide_task.RESULT_SCHEMA).toArrow()
    rows, kept = decide_task.task_results(result)
    figures, horizons = segment_figures(rows, span.segments)
    return TaskDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=only_touched,
        kept=kept,
    )


def _starts(segments: list[tuple[int, Segment]]) -> list[tuple[int, int]]:
    """(index, base offset) of each segment: what finds a winner's segment from its offset."""
    return [(i, seg.base_offset) for i, seg in segments]


def _remembered_beats(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, winners):
    """The winners joined to the remembered deletes; the column telling a remembered delete beats one."""
    from pyspark.sql import functions as F

    rem = remembered_df(spark, handle, manifest)
    if rem is None:
        return winners, F.lit(False)
    winners = winners.join(
        F.broadcast(rem.drop("m_expiry")) if manifest.remembered["count"] < 1_000_000 else rem.drop("m_expiry"),
        "key",
        "left",
    )
    return winners, F.col("m_offset").isNotNull() & spark_loses(config, "", "m_")


def _held(
    spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, winners, first_uncleanable: int, reads: ReadPaths
):
    """The winners with `until` (the highest offset above the range of a record its tombstone holds
    back), and the column telling a tombstone is held; (winners, None) when nothing lies above."""
    from pyspark.sql import functions as F

    ranks = rank_columns(config)
    outside = [(i, s) for i, s in enumerate(manifest.segments) if s.next_offset > first_uncleanable and s.records]
    if not outside:
        return winners, None
    out = with_spark_ranks(read_segments(spark, handle, manifest, outside, reads=reads), config)
    out = out.select("key", F.col("offset").alias("o_offset"), *[F.col(c).alias("o_" + c) for c in ranks])
    tombs = winners.where(F.col("tomb")).select(
        "key", F.col("offset").alias("t_offset"), *[F.col(c).alias("t_" + c) for c in ranks]
    )
    holds = (
        tombs.join(out, "key")
        .where(spark_loses(config, "o_", "t_"))
        .groupBy("t_offset")
        .agg(F.max("o_offset").alias("until"))
    )
    winners = winners.join(F.broadcast(holds), winners["offset"] == holds["t_offset"], "left").drop("t_offset")
    return winners, F.col("until").isNotNull()


def _collected(
    spark, decided, config: TopicConfig, span: CleaningRange, new_horizon: int, only_touched: bool
) -> CollectedDecision:
    """One job brings the winners here (about 40 bytes each): the figures are summed with Arrow, the write
    takes its kept offsets from the same table, and the guard's outputs, which read the winners again,
    get only the tombstones. Caching the winners instead cost a request of half a second to a Connect
    server, the cache's build and a second job for the kept offsets."""
    table = decided.select(*DECISION_COLUMNS, *rank_columns(config)).toArrow()
    figures, horizons = segment_figures(arrow_figures(table), span.segments)
    tombs = table.filter(table.column("tomb"))
    return CollectedDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=only_touched,
        kept=kept_offsets(table),
        tombstones=spark.createDataFrame(tombs if len(tombs) else table.slice(0, 0)),
    )


def _cached(decided, span: CleaningRange, new_horizon: int, only_touched: bool) -> CachedDecision:
    """The winners cached in Spark (a large range), their figures aggregated there."""
    from pyspark import StorageLevel

    decided = decided.persist(StorageLevel.MEMORY_AND_DISK)
    figures, horizons = segment_figures(spark_figures(decided), span.segments)
    return CachedDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=only_touched,
        winners=decided,
    )


WINNER_FIELDS = ("tomb", "delete_horizon", "size", "timestamp")  # a winner's columns besides key and offset


def narrow_rows(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    segs: list[tuple[int, Segment]],
    tuning: CleanerTuning,
):
    """Spark: the narrow columns of the segments' records that deciding reads (with the rank columns)."""
    from pyspark.sql import functions as F

    df = with_spark_ranks(read_segments(spark, handle, manifest, segs, reads=tuning.reads), config)
    return df.select(
        "offset",
        "key",
        "timestamp",
        F.col("is_tombstone").alias("tomb"),
        "delete_horizon",
        F.col("record_size").alias("size"),
        *rank_columns(config),
    )


def winners(
    spark,
    handle: LogHandle,
    narrow,
    grouped_rows: int,
    sample: list[tuple[int, Segment]],
    config: TopicConfig,
    tuning: CleanerTuning,
):
    """Spark: per key of `narrow` (about `grouped_rows` rows, read from the segments `sample`), its
    winner's rank columns, offset and WINNER_FIELDS."""
    from pyspark.sql import functions as F

    session = shuffle_partitions(spark)
    parts = group_partitions(grouped_rows, session, tuning)
    if not parts and keys_mostly_distinct(handle, sample, tuning):
        # A partial aggregation before the shuffle cannot reduce keys that barely repeat inside a task
        # (5M records over 500k keys: 4.3M of 5M rows left) and costs a hash aggregation of every row:
        # hashed by key as they are read, the rows meet one aggregation (5M records: 2.5 s of 10 saved).
        parts = session
    if parts:
        # hashed before the group-by, which then needs no other exchange
        narrow = narrow.repartition(parts, "key")
    ranks = rank_columns(config)
    if ranks:
        # the order as one number, not a struct: fixed-width buffers keep this a hash aggregation (5M
        # records, timestamp strategy: the group-by 14.6 s -> 10.7 s warm)
        narrow = narrow.withColumn("_order", spark_order_number(config))
        return narrow.groupBy("key").agg(*[F.max_by(c, "_order").alias(c) for c in (*ranks, "offset", *WINNER_FIELDS)])
    # fixed-width buffers keep this a hash aggregation (a struct buffer forces a sort)
    return narrow.groupBy("key").agg(
        F.max("offset").alias("offset"), *[F.max_by(c, "offset").alias(c) for c in WINNER_FIELDS]
    )


def group_partitions(grouped_rows: int, session_partitions: int, tuning: CleanerTuning = DEFAULT_TUNING) -> int:
    """The partitions that a group-by of `grouped_rows` rows hashes them into by key before aggregating;
    0: the session's shuffle partitions after a partial aggregation (when a sample of keys says it pays)."""
    if grouped_rows <= tuning.small_range_records:
        return 1
    parts = max(2, -(-grouped_rows // tuning.rows_per_partition))
    if parts < session_partitions:
        # A small range in the session's shuffle partitions (8) is mostly task overhead (17 tasks for a
        # 2,000-record log): as many partitions as its size needs; shuffling every narrow row costs little
        # at this size, and a partial aggregation would barely reduce rows whose keys are mostly distinct.
        return parts
    # A task's hash aggregation holds its keys in the Spark driver's heap under a local master: a range
    # too large for the session's partitions is spread so that no task holds more than
    # `group_task_max_rows` (50M distinct keys in 8 tasks ran a 1 GiB heap out of memory; in 50 they spilled)
    bounded = -(-grouped_rows // tuning.group_task_max_rows)
    return bounded if bounded > session_partitions else 0


def keys_mostly_distinct(
    handle: LogHandle, segments: list[tuple[int, Segment]], tuning: CleanerTuning = DEFAULT_TUNING
) -> bool:
    """Whether a sample of the keys (up to `key_sample_rows`, from files in the middle of `segments`,
    read on the driver) is at least `distinct_skips_partial` distinct: then a partial aggregation is wasted."""
    files = [ref for _, seg in segments for ref in seg.files]
    start = max(0, len(files) // 2 - tuning.key_sample_max_files // 2)
    chunks, rows = [], 0
    for ref in files[start : start + tuning.key_sample_max_files]:
        if rows >= tuning.key_sample_rows:
            break
        column = handle.st.read_parquet(handle.path(ref.name), columns=["key"]).column("key")
        column = column.slice(0, tuning.key_sample_rows - rows)
        chunks.extend(column.chunks)
        rows += len(column)
    if not rows:
        return False
    return len(pc.unique(pa.chunked_array(chunks))) >= tuning.distinct_skips_partial * rows
