"""Appending a Spark DataFrame to a log (SPEC §1) as `writer.append` appends Arrow data: same rules, same
commit, with Spark writing the segment files and only narrow columns reaching the driver."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.log.batch_rules import _array, find_rolls, plan_batch
from compaction_assets.log.strategies import strategy_of
from compaction_assets.log.writer import AppendResult, commit_append, new_holds
from compaction_assets.segments.records import spark_record_size, spark_schema
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Hold, Manifest
from compaction_assets.topics.config import TopicConfig


def append_spark(
    handle: LogHandle,
    config: TopicConfig,
    df,
    *,
    now: int | None = None,
    drop_invalid: bool = False,
    source: str = "spark dataframe",
) -> AppendResult:
    """Append a Spark DataFrame (key, value, optional timestamp, headers, offset) in its row order.

    The rows are staged once (so their order is fixed), only narrow columns (row id, offset, timestamp,
    size, null key) reach the driver to apply the roll rules, and Spark writes one file per segment.
    """
    from pyspark.sql import functions as F

    cols = _spark_columns(df, source)
    with handle.lock("append", purpose=f"append from {source}"):
        base = handle.manifest()
        stage = f"data/stage-{uuid.uuid4().hex}"
        df.select(*cols).withColumn("_rid", F.monotonically_increasing_id()).write.parquet(handle.spark_uri(stage))
        try:
            staged = df.sparkSession.read.parquet(handle.spark_uri(stage))
            return _append_staged(handle, config, base, staged, _plan_staged(staged, base, now, drop_invalid, source))
        finally:
            handle.st.delete(handle.path(stage))


@dataclass(frozen=True)
class StagedPlan:
    """The staged rows to append, as the batch rules assign them: their row ids in order, their offsets
    and timestamps, and how many rows were invalid (dropped)."""

    rids: pa.Array
    offsets: np.ndarray
    timestamps: np.ndarray
    invalid: int


def _plan_staged(staged, base: Manifest, now: int | None, drop_invalid: bool, source: str) -> StagedPlan:
    """The batch rules (SPEC §1) applied to the staged rows' narrow columns, read on the driver."""
    from pyspark.sql import functions as F

    narrow = (
        staged.select("_rid", "offset", "timestamp", F.col("key").isNull().alias("null_key")).orderBy("_rid").toArrow()
    )
    keep, offsets, timestamps, invalid = plan_batch(
        _array(narrow.column("offset")),
        narrow.column("null_key").to_numpy(zero_copy_only=False),
        _array(narrow.column("timestamp")),
        base.log_end_offset,
        now,
        drop_invalid,
        source,
    )
    rids = _array(narrow.column("_rid"))
    if keep is not None:
        rids = rids.filter(pa.array(keep))
    return StagedPlan(rids, offsets, timestamps, invalid)


def _append_staged(handle: LogHandle, config: TopicConfig, base: Manifest, staged, plan: StagedPlan) -> AppendResult:
    """Write the planned rows as segments and commit them on `base` (or only count the invalid rows)."""
    offsets, invalid = plan.offsets, plan.invalid
    if len(offsets) == 0:
        if invalid:
            handle.update(lambda m: m.with_(invalid_records=m.invalid_records + invalid))
        return AppendResult(0, None, None, invalid, 0, base.log_end_offset)
    active = base.active
    rolls = find_rolls(
        _staged_sizes(staged, plan.rids),
        plan.timestamps,
        active.size,
        active.min_ts if not active.empty else None,
        config.segment_bytes,
        config.roll_interval_ms,
    )
    out_dir, written, stats_rows = _write_segments(handle, staged, plan.rids, offsets, plan.timestamps, rolls)
    chunks = _spark_chunks(handle, out_dir, rolls, offsets, stats_rows)
    commit_append(handle, base, chunks, int(offsets[-1]) + 1, invalid, _spark_holds(handle, base, config, written))
    return AppendResult(len(offsets), int(offsets[0]), int(offsets[-1]), invalid, len(rolls), int(offsets[-1]) + 1)


def _spark_holds(handle: LogHandle, base: Manifest, config: TopicConfig, written) -> tuple[Hold, ...]:
    """The kept tombstones the written rows would lose to (`new_holds`); of the written rows, only those whose
    key the tombstone index lists reach the driver. None where the strategy needs no guard."""
    if not strategy_of(config).needs_guard or not base.tombstone_index or not base.tombstone_index.get("count"):
        return ()
    index = written.sparkSession.read.parquet(handle.spark_uri(base.tombstone_index["file"])).select("key")
    probe = written.join(index, "key", "left_semi").toArrow()
    return new_holds(handle, base, config, probe)


def _spark_columns(df, source: str) -> list:
    """The DataFrame's record columns cast to the segment schema (absent optional ones null); refuses a
    missing required or an unknown column."""
    from pyspark.sql import functions as F

    missing = [c for c in ("key", "value") if c not in df.columns]
    unknown = [c for c in df.columns if c not in ("key", "value", "timestamp", "headers", "offset")]
    if missing or unknown:
        raise InvalidInputError(
            f"{source}: " + (f"missing required column(s) {missing}" if missing else f"unknown column(s) {unknown}")
        )
    target = {f.name: f.dataType for f in spark_schema().fields}
    cols = []
    for name in ("key", "value", "timestamp", "headers", "offset"):
        col = F.col(name) if name in df.columns else F.lit(None)
        typ = target["timestamp"] if name == "offset" else target[name]
        cols.append(col.cast(typ).alias(name))
    return cols


def _staged_sizes(staged, rids: pa.Array) -> np.ndarray:
    """The logical size of each staged row `rids` names, in that order."""
    sizes = staged.select("_rid", spark_record_size().alias("size")).orderBy("_rid").toArrow()
    size_by_rid = dict(zip(sizes.column("_rid").to_pylist(), sizes.column("size").to_pylist()))
    return np.array([size_by_rid[r] for r in rids.to_pylist()], dtype=np.int64)


def _write_segments(handle: LogHandle, staged, rids: pa.Array, offsets, ts, rolls: list[int]):
    """Spark writes the staged rows with their offsets and timestamps, a folder per new segment; the
    folder, the written rows and each segment's figures."""
    from pyspark.sql import functions as F

    spark = staged.sparkSession
    seg_of = np.zeros(len(offsets), dtype=np.int32)
    for r in rolls:
        seg_of[r:] += 1
    assign = spark.createDataFrame(
        pa.table(
            {"_rid": rids, "offset": pa.array(offsets), "timestamp": pa.array(ts), "seg": pa.array(seg_of)}
        ).to_pandas()
    )
    out_dir = f"data/append-{uuid.uuid4().hex}"
    rows = (
        staged.drop("offset", "timestamp")
        .join(assign, "_rid")
        .select(
            "offset",
            "key",
            "value",
            "timestamp",
            "headers",
            F.lit(None).cast("long").alias("delete_horizon"),
            spark_record_size().alias("record_size"),
            F.col("value").isNull().alias("is_tombstone"),
            "seg",
        )
    )
    rows = rows.repartition(max(1, min(len(rolls) + 1, 64)), "seg").sortWithinPartitions("seg", "offset")
    rows.write.partitionBy("seg").parquet(handle.spark_uri(out_dir))
    written = spark.read.schema(spark_schema()).parquet(handle.spark_uri(out_dir))
    stats_rows = {
        int(r["seg"]): r.asDict()
        for r in written.withColumn("size", spark_record_size())
        .groupBy("seg")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum("size").alias("size"),
            F.min("timestamp").alias("min_ts"),
            F.max("timestamp").alias("max_ts"),
            F.min(F.struct("offset", "timestamp"))["timestamp"].alias("first_ts"),
            F.min(F.when(F.col("timestamp") > 0, F.col("timestamp"))).alias("min_pos_ts"),
            F.sum(F.col("value").isNull().cast("long")).alias("tombstones"),
        )
        .collect()
    }
    return out_dir, written, stats_rows


def _spark_chunks(handle: LogHandle, out_dir: str, rolls: list[int], offsets, stats_rows: dict) -> list:
    """The written segments as `commit_append` takes them: (first offset, files, figures)."""
    chunks = []
    for seg, first in enumerate([0, *rolls]):
        refs = [
            FileRef(f"{out_dir}/seg={seg}/{n}", 0)
            for n in handle.st.list_dir(handle.path(f"{out_dir}/seg={seg}"))
            if n.endswith(".parquet")
        ]
        st = {k: v for k, v in stats_rows[seg].items() if k != "seg"}
        st["horizons"] = ()
        refs = [FileRef(r.name, int(st["records"]) if len(refs) == 1 else 0) for r in refs]
        chunks.append((int(offsets[first]), sorted(refs, key=lambda r: r.name), st))
    return chunks
