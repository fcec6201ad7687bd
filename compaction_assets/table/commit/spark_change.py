"""A log's change to its topic's table found and written by Spark tasks: a commit past the in-process bound.

The same change as change.py's comparison here, by the same rule: the log's latest state (Spark's,
state/latest_state.py's `latest_state_df`) joined by key with the table's live rows of the log partition
(read with where each lies by Python workers a data file at a time: spark_tasks.py's `live_reader`); a key
whose winning offset differs, is new, or is gone was touched. The touched keys' new rows are written as data
files and their old rows masked by position-delete files, both by the workers; only the written files'
metadata and their counts come back, and snapshot.py commits them with the other logs' in one snapshot, with
the same marks and figures as a commit here. Without a table (or without rows of the partition in it) every
row of the state is new.

The joined rows are persisted (memory, then disk) for the two writes that read them, and dropped after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction_assets.log.spark_reads import ship_by_value
from compaction_assets.state.latest_state import empty_state, latest_state_df, with_value_columns_df
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.rewrite import REWRITE_MAX_DATA_FILES
from compaction_assets.table.commit.route import SparkSource
from compaction_assets.table.schema import conform, table_rows

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table, Transaction

# the visible bytes a task of the join and the writes takes: a large log gets more tasks than Spark's
# shuffle partitions, so that a task's rows stay a bounded share of a worker's memory
TASK_BYTES = 128 << 20


@dataclass(frozen=True)
class SparkWrite:
    """What the Spark tasks wrote for one log: data files, position-delete files, and the change's counts."""

    data: list[DataFile]
    deletes: list[DataFile]
    added: int
    deleted: int
    masked: int


def write_with_spark(tx: Transaction, table: Table | None, ident: str, source: SparkSource, tasks: list[FileScanTask]):
    """The log's change against the table's live rows in the partition's file scan `tasks`, written as
    files of the table of `tx` by Spark tasks (not committed); its `SparkWrite`."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from compaction_assets.spark import get_spark
    from compaction_assets.table import iceberg_internals, schema
    from compaction_assets.table.commit import delta, spark_tasks
    from compaction_assets.table.iceberg_internals import transaction_io

    handle, manifest = source.handle, source.manifest
    partition = parse_log_name(handle.name)[1]
    spark = get_spark()
    # the table's schema evolved for the log's value fields here, from the state's columns alone
    shape = conform(tx, table_rows(handle, empty_state(), partition), ident).schema
    io = transaction_io(tx)
    ship_by_value(spark_tasks, delta, iceberg_internals, schema)
    n = _tasks(spark, manifest.total_size)
    state = with_value_columns_df(handle, latest_state_df(spark, handle, source.config, manifest))
    columns = state.columns
    changed = masks = None
    if table is None or not tasks:
        rows = state
    else:
        live = _live_rows(spark, tasks, io, n)
        mine = state.withColumnRenamed("offset", "s").repartition(n, "key")
        joined = mine.join(live, "key", "full_outer")
        differs = F.col("s").isNull() | F.col("t").isNull() | (F.col("s") != F.col("t"))
        changed = joined.where(differs).persist(StorageLevel.MEMORY_AND_DISK)
        rows = changed.where(F.col("s").isNotNull()).select(
            *[F.col("s").alias("offset") if c == "offset" else F.col(c) for c in columns]
        )
        masks = changed.where(F.col("t").isNotNull()).select("file", "pos", F.col("s").isNull().alias("gone"))
    try:
        runner = spark_tasks.data_writer(tx.table_metadata, io, shape, partition)
        # the headers go to the workers as text: Spark's Arrow writer spends about 60 CPU s a million rows on a
        # list of structs, even an empty one, and 3 on its JSON (docs/performance.md)
        rows = rows.withColumn("headers", F.to_json("headers"))
        rows = _by_bucket(rows, _buckets(tx), manifest.total_size)
        data, added, _ = spark_tasks.written_files(rows.mapInArrow(runner, spark_tasks.WRITTEN_SCHEMA).toArrow())
        deletes: list[DataFile] = []
        masked = deleted = 0
        if masks is not None:
            runner = spark_tasks.delete_writer([task.file for task in tasks], io)
            written = masks.repartition(n, "file").mapInArrow(runner, spark_tasks.WRITTEN_SCHEMA).toArrow()
            deletes, masked, deleted = spark_tasks.written_files(written)
    finally:
        if changed is not None:
            changed.unpersist()
    return SparkWrite(data, deletes, added, deleted, masked)


def _buckets(tx: Transaction) -> int:
    """The key buckets of the table's partition spec (the one it was made with, whatever the settings say now)."""
    from pyiceberg.transforms import BucketTransform

    spec = tx.table_metadata.spec()
    return next((f.transform.num_buckets for f in spec.fields if isinstance(f.transform, BucketTransform)), 1)


def _by_bucket(rows, buckets: int, visible_bytes: int):
    """`rows` hashed to the writers by their key bucket: a bucket's rows reach one task, and make one file, unless
    the log is so large that a bucket's share of it is split over several tasks (TASK_BYTES each, by a hash of
    the key: two shares may meet in one task). At most half REWRITE_MAX_DATA_FILES shares: more files would make
    the bucket due for a rewrite (rewrite.py) at once; past that a task takes more (more buckets split less)."""
    from pyspark.sql import functions as F

    from compaction_assets.table.commit import spark_tasks

    split = min(max(1, -(-visible_bytes // (buckets * TASK_BYTES))), REWRITE_MAX_DATA_FILES // 2)
    if buckets == 1:  # every row is in the one bucket: the tasks merged, no shuffle and no bucket to work out
        return rows.coalesce(split)
    # typed by its hints (pa.Array to pa.Array), which pyspark's stubs have no overload for without a functionType
    bucket = F.arrow_udf(spark_tasks.key_bucket(buckets), "int")(F.col("key"))  # type: ignore[call-overload]
    if split == 1:
        return rows.repartition(buckets, bucket)
    return rows.repartition(buckets * split, bucket, F.pmod(F.xxhash64("key"), F.lit(split)))


def _tasks(spark, visible_bytes: int) -> int:
    """The tasks of the join and the writes: Spark's shuffle partitions, more for a large log."""
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    return max(shuffle, -(-visible_bytes // TASK_BYTES))


def _live_rows(spark, tasks: list[FileScanTask], io, n: int):
    """The table's live rows of the partition (key, t, file, pos), read by workers a data file at a time and
    hashed by key into `n` partitions (the state's, so that the join moves the state no further). Spark's own
    Parquet reader (`_metadata.row_index`, an anti join on the position deletes) was tried for tables on a
    local disk: it did not cost less at 2M records (docs/performance.md), and a second reader would have left
    the object stores' one untested."""
    from compaction_assets.table.commit import spark_tasks

    files = [(task.file.file_path, [d.file_path for d in task.delete_files]) for task in tasks]
    runner = spark_tasks.live_reader(files, io)
    slices = min(len(files), n)
    return spark.range(0, len(files), 1, slices).mapInArrow(runner, spark_tasks.LIVE_SCHEMA).repartition(n, "key")
