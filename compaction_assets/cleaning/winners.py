"""The winner of every key of a range (SPEC §6): a group-by over narrow rows, in Spark.

Shared by the grouped decision (decide.py) and the newer rows of a probed one (probe.py). How the rows
reach the group-by is chosen by size: one partition for a small range, hashed by key when a sample of
keys says a partial aggregation would not reduce them, Spark's partial aggregation otherwise.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.placement import shuffle_partitions
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest, Segment
from compaction_assets.log.ranking import rank_columns, spark_order_number, with_spark_ranks
from compaction_assets.log.reader import read_segments
from compaction_assets.log.store import LogHandle

WINNER_FIELDS = ("tomb", "delete_horizon", "size", "timestamp")   # a winner's columns besides key and offset


def narrow_rows(spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, segs: list[tuple[int, Segment]],
                tuning: CleanerTuning):
    """Spark: the narrow columns of the segments' records that deciding reads (with the rank columns)."""
    from pyspark.sql import functions as F

    df = with_spark_ranks(read_segments(spark, handle, manifest, segs, reads=tuning.reads), config)
    return df.select("offset", "key", "timestamp", F.col("is_tombstone").alias("tomb"),
                     "delete_horizon", F.col("record_size").alias("size"), *rank_columns(config))


def winners(spark, handle: LogHandle, narrow, grouped_rows: int, sample: list[tuple[int, Segment]],
            config: TopicConfig, tuning: CleanerTuning):
    """Spark: per key of `narrow` (about `grouped_rows` rows, read from the segments `sample`), its
    winner's rank columns, offset and WINNER_FIELDS."""
    from pyspark.sql import functions as F

    parts = 1 if grouped_rows <= tuning.small_range_records else max(2, -(-grouped_rows // tuning.rows_per_partition))
    if parts < shuffle_partitions(spark):
        # A small range in the session's shuffle partitions (8) is mostly task overhead (17 tasks for a
        # 2,000-record log): as many partitions as its size needs, hashed before the group-by (which then
        # needs no other exchange); shuffling every narrow row costs little at this size, and a
        # partial aggregation would barely reduce rows whose keys are mostly distinct.
        narrow = narrow.repartition(parts, "key")
    elif keys_mostly_distinct(handle, sample, tuning):
        # A partial aggregation before the shuffle cannot reduce keys that barely repeat inside a task
        # (5M records over 500k keys: 4.3M of 5M rows left) and costs a hash aggregation of every row:
        # hashed by key as they are read, the rows meet one aggregation (5M records: 2.5 s of 10 saved).
        narrow = narrow.repartition(shuffle_partitions(spark), "key")
    ranks = rank_columns(config)
    if ranks:
        # the order as one number, not a struct: fixed-width buffers keep this a hash aggregation (5M
        # records, timestamp strategy: the group-by 14.6 s -> 10.7 s warm)
        narrow = narrow.withColumn("_order", spark_order_number(config))
        return narrow.groupBy("key").agg(*[F.max_by(c, "_order").alias(c) for c in (*ranks, "offset", *WINNER_FIELDS)])
    # fixed-width buffers keep this a hash aggregation (a struct buffer forces a sort)
    return narrow.groupBy("key").agg(F.max("offset").alias("offset"),
                                     *[F.max_by(c, "offset").alias(c) for c in WINNER_FIELDS])


def keys_mostly_distinct(handle: LogHandle, segments: list[tuple[int, Segment]],
                         tuning: CleanerTuning = DEFAULT_TUNING) -> bool:
    """Whether a sample of the keys (up to `key_sample_rows`, from files in the middle of `segments`,
    read on the driver) is at least `distinct_skips_partial` distinct: then a partial aggregation is wasted."""
    files = [ref for _, seg in segments for ref in seg.files]
    start = max(0, len(files) // 2 - tuning.key_sample_max_files // 2)
    chunks, rows = [], 0
    for ref in files[start:start + tuning.key_sample_max_files]:
        if rows >= tuning.key_sample_rows:
            break
        column = handle.st.read_parquet(handle.path(ref.name), columns=["key"]).column("key")
        column = column.slice(0, tuning.key_sample_rows - rows)
        chunks.extend(column.chunks)
        rows += len(column)
    if not rows:
        return False
    return len(pc.unique(pa.chunked_array(chunks))) >= tuning.distinct_skips_partial * rows
