"""The decision's routes through Spark: the winners found by a group-by, the decision worked out from them.

Winners (`winners`, `narrow_rows`; SPEC §6): a group-by over narrow rows (key, offset, rank, tombstone
flag, horizon), in Spark, for the grouped decision and the newer rows of a probed one (`keyed_winners`).
How the rows reach the group-by is chosen by size (spark_tasks.py's `group_partitions`): one partition for a
small range, hashed by key when a sample of keys says a partial aggregation would not reduce them, Spark's
partial aggregation otherwise. In a large range whose newer rows are few, only the touched keys are
grouped (`range_winners`: the newer rows and the older rows of their keys), so a cleaning after 1% of new
records shuffles about 2% of the rows, not all of them.

From the winners, three routes to a `Decision`, as the placement chooses (placement.py): the offset strategy's decision
worked out here from the collected winners (`collected_offset_decision`) or in the group-by's own tasks
(`decided_in_tasks`, decide/arrow_decision.py); the other strategies' decision columns (`decision_columns`: the
remembered deletes and the resurrection guard's holds applied) collected (`collected`) or cached in Spark
(`cached`). A winner's segment is found from its offset after the group-by, not for every record.
"""

from __future__ import annotations

from compaction_assets.cleaning.decide import arrow_decision
from compaction_assets.cleaning.decide.arrow_decision import arrow_figures, kept_offsets, offset_decision
from compaction_assets.cleaning.decide.decision import (
    DECISION_COLUMNS,
    CachedDecision,
    CollectedDecision,
    TaskDecision,
    segment_figures,
    segment_starts,
    spark_figures,
    totals,
)
from compaction_assets.cleaning.decide.spark_tasks import (
    group_partitions,
    keys_mostly_distinct,
    shuffle_partitions,
)
from compaction_assets.cleaning.tuning import CleanerTuning
from compaction_assets.log.side_tables import remembered_df
from compaction_assets.log.spark_reads import ReadPaths, read_segments, segment_index, ship_by_value
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment
from compaction_assets.topics.config import TopicConfig

WINNER_FIELDS = ("tomb", "delete_horizon", "size", "timestamp")  # a winner's columns besides key and offset


def range_winners(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    tuning: CleanerTuning,
    only_touched: bool,
):
    """Spark: the winner of every key of the range, grouping only the keys its newer rows touch when
    `only_touched` (placement.py's choice)."""
    from pyspark.sql import functions as F

    if only_touched:
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
        return single.select("key", *strategy_of(config).rank_columns, "offset", *WINNER_FIELDS).unionByName(grouped)
    narrow = narrow_rows(spark, handle, manifest, config, span.segments, tuning)
    return winners(spark, handle, narrow, span.rows, span.segments, config, tuning)


def keyed_winners(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    segs: list[tuple[int, Segment]],
    rows: int,
    tuning: CleanerTuning,
):
    """Spark: per key of the segments `segs` (about `rows` rows) its winner's key, offset and
    WINNER_FIELDS (the newer rows of a probed decision, grouped in Spark)."""
    narrow = narrow_rows(spark, handle, manifest, config, segs, tuning)
    return winners(spark, handle, narrow, rows, segs, config, tuning).select("key", "offset", *WINNER_FIELDS)


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

    strategy = strategy_of(config)
    df = strategy.with_spark_ranks(read_segments(spark, handle, manifest, segs, reads=tuning.reads))
    return df.select(
        "offset",
        "key",
        "timestamp",
        F.col("is_tombstone").alias("tomb"),
        "delete_horizon",
        F.col("record_size").alias("size"),
        *strategy.rank_columns,
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
        # and costs a hash aggregation of every row: hashed by key as they are read, the rows meet one
        # aggregation.
        parts = session
    if parts:
        # hashed before the group-by, which then needs no other exchange
        narrow = narrow.repartition(parts, "key")
    strategy = strategy_of(config)
    ranks = strategy.rank_columns
    if ranks:
        # the order as one number, not a struct: fixed-width buffers keep this a hash aggregation (a struct
        # buffer forces a sort)
        narrow = narrow.withColumn("_order", strategy.spark_order_number())
        return narrow.groupBy("key").agg(*[F.max_by(c, "_order").alias(c) for c in (*ranks, "offset", *WINNER_FIELDS)])
    # fixed-width buffers keep this a hash aggregation (a struct buffer forces a sort)
    return narrow.groupBy("key").agg(
        F.max("offset").alias("offset"), *[F.max_by(c, "offset").alias(c) for c in WINNER_FIELDS]
    )


def collected_offset_decision(
    found, span: CleaningRange, now: int, new_horizon: int, only_touched: bool
) -> CollectedDecision:
    """The offset strategy's decision worked out here from its collected winners `found`.

    That decision depends on a winner's own row, `now` and its segment only, so the Spark plan holds no
    value of this cleaning: Spark compiles a plan with its literals in the code, and with `now` and the
    segment bounds in it every cleaning would compile its own."""
    table = offset_decision(
        found.select("offset", *WINNER_FIELDS).toArrow(), segment_starts(span.segments), now, new_horizon
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


def decided_in_tasks(found, span: CleaningRange, now: int, new_horizon: int, only_touched: bool) -> TaskDecision:
    """The offset strategy's decision worked out in the tasks that group the winners (decide/arrow_decision.py):
    one job, and only the figures and the kept offsets come here."""
    ship_by_value(arrow_decision)
    runner = arrow_decision.decision_runner(segment_starts(span.segments), now, new_horizon)
    result = found.select("offset", *WINNER_FIELDS).mapInArrow(runner, arrow_decision.RESULT_SCHEMA).toArrow()
    rows, kept = arrow_decision.task_results(result)
    figures, horizons = segment_figures(rows, span.segments)
    return TaskDecision(
        figures=figures,
        horizons=horizons,
        stats=totals(figures),
        new_horizon=new_horizon,
        only_touched_keys=only_touched,
        kept=kept,
    )


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

    guard = strategy_of(config).needs_guard
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
    # two projections, not a column at a time (each is analysed again, every column's projection over the
    # plan so far), and `keep` once (its guard comparisons repeated in every column made the plan many times
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


def _remembered_beats(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, winners):
    """The winners joined to the remembered deletes; the column telling a remembered delete beats one."""
    from pyspark.sql import functions as F

    remembered = manifest.remembered
    if not remembered:
        return winners, F.lit(False)
    rem = remembered_df(spark, handle, manifest)
    winners = winners.join(
        F.broadcast(rem.drop("m_expiry")) if remembered["count"] < 1_000_000 else rem.drop("m_expiry"),
        "key",
        "left",
    )
    return winners, F.col("m_offset").isNotNull() & strategy_of(config).spark_loses("", "m_")


def _held(
    spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, winners, first_uncleanable: int, reads: ReadPaths
):
    """The winners with `until` (the highest offset above the range of a record its tombstone holds
    back), and the column telling a tombstone is held; (winners, None) when nothing lies above."""
    from pyspark.sql import functions as F

    strategy = strategy_of(config)
    ranks = strategy.rank_columns
    outside = [(i, s) for i, s in enumerate(manifest.segments) if s.next_offset > first_uncleanable and s.records]
    if not outside:
        return winners, None
    out = strategy.with_spark_ranks(read_segments(spark, handle, manifest, outside, reads=reads))
    out = out.select("key", F.col("offset").alias("o_offset"), *[F.col(c).alias("o_" + c) for c in ranks])
    tombs = winners.where(F.col("tomb")).select(
        "key", F.col("offset").alias("t_offset"), *[F.col(c).alias("t_" + c) for c in ranks]
    )
    holds = (
        tombs.join(out, "key")
        .where(strategy.spark_loses("o_", "t_"))
        .groupBy("t_offset")
        .agg(F.max("o_offset").alias("until"))
    )
    winners = winners.join(F.broadcast(holds), winners["offset"] == holds["t_offset"], "left").drop("t_offset")
    return winners, F.col("until").isNotNull()


def collected(
    spark, decided, config: TopicConfig, span: CleaningRange, new_horizon: int, only_touched: bool
) -> CollectedDecision:
    """One job brings the winners here (about 40 bytes each): the figures are summed with Arrow, the write
    takes its kept offsets from the same table, and the guard's outputs, which read the winners again,
    get only the tombstones. Caching the winners instead would cost a request to a Connect server, the
    cache's build and a second job for the kept offsets."""
    table = decided.select(*DECISION_COLUMNS, *strategy_of(config).rank_columns).toArrow()
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


def cached(decided, span: CleaningRange, new_horizon: int, only_touched: bool) -> CachedDecision:
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
