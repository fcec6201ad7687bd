"""How to clean (SPEC §6): the Spark job that rewrites the segments below the first uncleanable offset.

Two phases, so that values are read only where a file must be rewritten:
  decide  - a narrow scan (key, offset, rank, tombstone flag, horizon) of the rewritten range picks
            the winner of every key, applies the delete horizons, the resurrection guard and the
            remembered deletes, and aggregates per segment (small results only reach the driver);
  rewrite - only segments that lose a record are rewritten (one Spark write, one file per segment);
            a segment that only needs tombstone horizons gets them as a file-level stamp.
Nothing is collected to the driver but per-segment figures and the few held tombstones.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from .config import INT64_MAX, TopicConfig
from .manifest import FileRef, Hold, Manifest, Segment, combine, new_id
from .planner import rewritten_segments
from .ranking import rank_columns, spark_loses, spark_order, with_spark_ranks
from .store import LogHandle


def spark_schema():
    from pyspark.sql.types import (ArrayType, BinaryType, LongType, StringType, StructField,
                                   StructType)
    header = StructType([StructField("name", StringType()), StructField("value", BinaryType())])
    return StructType([
        StructField("offset", LongType(), False), StructField("key", BinaryType(), False),
        StructField("value", BinaryType()), StructField("timestamp", LongType(), False),
        StructField("headers", ArrayType(header)), StructField("delete_horizon", LongType()),
    ])


def read_segments(spark, handle: LogHandle, segments: list[tuple[int, Segment]], log_start: int):
    """Records of the given (index, segment) pairs with `seg_idx` and the effective delete horizon."""
    from pyspark.sql import functions as F

    entries = [(ref, idx) for idx, seg in segments for ref in seg.files]
    if not entries:
        return spark.createDataFrame([], spark_schema()).withColumn("seg_idx", F.lit(0))
    uris = [handle.spark_uri(ref.name) for ref, _ in entries]
    meta = spark.createDataFrame([(ref.name, idx, ref.stamp) for ref, idx in entries],
                                 "file_ref string, seg_idx int, stamp long")
    pattern = "/" + re.escape(handle.name) + "/(data/.+)$"
    df = (spark.read.schema(spark_schema()).parquet(*uris)
          .withColumn("file_ref", F.regexp_extract(F.col("_metadata.file_path"), pattern, 1))
          .join(F.broadcast(meta), "file_ref")
          .where(F.col("offset") >= F.lit(log_start)))
    horizon = F.when(F.col("value").isNull(), F.coalesce(F.col("delete_horizon"), F.col("stamp")))
    return df.withColumn("delete_horizon", horizon).drop("stamp", "file_ref")


def logical_size():
    from pyspark.sql import functions as F

    headers = F.aggregate(F.coalesce(F.col("headers"), F.array()), F.lit(0).cast("long"),
                          lambda acc, h: acc + F.octet_length(h["name"]) + F.coalesce(F.length(h["value"]), F.lit(0)))
    return F.lit(16) + F.length("key") + F.coalesce(F.length("value"), F.lit(0)) + headers


@dataclass
class Decision:
    """The outcome of the decide phase, before anything is written."""
    per_segment: dict[int, dict]
    horizons: dict[int, list[tuple[int, int, int, int]]]
    stats: dict
    decided: object            # the persisted Spark DataFrame of the range with decisions
    new_horizon: int


@dataclass
class CleanOutput:
    segments: tuple[Segment, ...]          # replaces the first `replaced` segments of the snapshot
    replaced: tuple[str, ...]
    stats: dict
    holds: tuple[Hold, ...] = ()
    remembered: dict | None = None
    tombstone_index: dict | None = None
    files_rewritten: int = 0
    extra: dict = field(default_factory=dict)


def remembered_df(spark, handle: LogHandle, m: Manifest):
    if not m.remembered:
        return None
    return spark.read.parquet(handle.spark_uri(m.remembered["file"]))


def decide(spark, handle: LogHandle, m: Manifest, config: TopicConfig, u: int, now: int) -> Decision:
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ranks = rank_columns(config)
    guard = config.strategy != "offset"
    range_segs = list(enumerate(rewritten_segments(m, u)))  # a prefix of m.segments
    new_horizon = min(now + config.delete_retention_ms, INT64_MAX)

    df = with_spark_ranks(read_segments(spark, handle, range_segs, m.log_start_offset), config)
    narrow = df.select("offset", "key", "timestamp", (F.col("value").isNull()).alias("tomb"),
                       "delete_horizon", "seg_idx", logical_size().alias("size"), *ranks)
    winner = F.max(spark_order(config)).over(Window.partitionBy("key"))
    narrow = narrow.withColumn("is_winner", winner["offset"] == F.col("offset"))

    rem = remembered_df(spark, handle, m) if guard else None
    if rem is not None:
        narrow = narrow.join(F.broadcast(rem.drop("m_expiry")) if m.remembered["count"] < 1_000_000
                             else rem.drop("m_expiry"), "key", "left")
        rem_beats = F.col("m_offset").isNotNull() & spark_loses(config, "", "m_")
    else:
        rem_beats = F.lit(False)

    outside = [(i, s) for i, s in enumerate(m.segments) if s.next_offset > u and s.records]
    if guard and outside:
        out = with_spark_ranks(read_segments(spark, handle, outside, m.log_start_offset), config)
        out = out.select("key", F.col("offset").alias("o_offset"), *[F.col(c).alias("o_" + c) for c in ranks])
        tombs = narrow.where(F.col("is_winner") & F.col("tomb")).select(
            "key", F.col("offset").alias("t_offset"), *[F.col(c).alias("t_" + c) for c in ranks])
        holds = (tombs.join(out, "key").where(spark_loses(config, "o_", "t_"))
                 .groupBy("t_offset").agg(F.max("o_offset").alias("until")))
        narrow = narrow.join(F.broadcast(holds), narrow["offset"] == holds["t_offset"], "left").drop("t_offset")
    else:
        narrow = narrow.withColumn("until", F.lit(None).cast("long"))

    expired = F.col("tomb") & F.col("delete_horizon").isNotNull() & (F.lit(now) >= F.col("delete_horizon"))
    held = F.col("until").isNotNull() if guard else F.lit(False)
    alive = F.col("is_winner") & ~rem_beats
    decided = (narrow
               .withColumn("removed_tomb", alive & expired & ~held)
               .withColumn("keep", alive & ~(expired & ~held))
               .withColumn("stamped", F.col("keep") & F.col("tomb") & F.col("delete_horizon").isNull())
               .withColumn("new_horizon", F.when(F.col("keep") & F.col("tomb"),
                                                 F.coalesce(F.col("delete_horizon"), F.lit(new_horizon))))
               .persist(StorageLevel.MEMORY_AND_DISK))

    keep = F.col("keep")
    # One job: per segment and kept-tombstone horizon (null for other records), merged per segment below.
    hkey = F.when(keep & F.col("tomb"), F.col("new_horizon")).alias("hkey")
    rows = decided.groupBy("seg_idx", hkey).agg(
        F.count(F.lit(1)).alias("read"), F.sum("size").alias("bytes_read"),
        F.sum(keep.cast("long")).alias("kept"), F.sum(F.when(keep, F.col("size"))).alias("kept_bytes"),
        F.min(F.when(keep, F.col("timestamp"))).alias("min_ts"),
        F.max(F.when(keep, F.col("timestamp"))).alias("max_ts"),
        F.min(F.when(keep, F.struct("offset", "timestamp"))).alias("first"),
        F.min(F.when(keep & (F.col("timestamp") > 0), F.col("timestamp"))).alias("min_pos_ts"),
        F.sum((keep & F.col("tomb")).cast("long")).alias("tombstones"),
        F.sum(F.col("stamped").cast("long")).alias("stamped"),
        F.sum(F.col("removed_tomb").cast("long")).alias("removed_tomb"),
        F.min(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_lo"),
        F.max(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_hi"),
    ).collect()
    per_segment: dict[int, dict] = {}
    horizons: dict[int, list[tuple[int, int, int, int]]] = {}
    for r in rows:
        idx = r["seg_idx"]
        if r["hkey"] is not None:
            horizons.setdefault(idx, []).append((int(r["hkey"]), int(r["tombstones"]), int(r["tomb_lo"]),
                                                 int(r["tomb_hi"])))
        cur = per_segment.setdefault(idx, {"read": 0, "bytes_read": 0, "kept": 0, "kept_bytes": 0, "min_ts": None,
                                           "max_ts": None, "first": None, "min_pos_ts": None, "tombstones": 0,
                                           "stamped": 0, "removed_tomb": 0})
        for name in ("read", "bytes_read", "kept", "kept_bytes", "tombstones", "stamped", "removed_tomb"):
            cur[name] += int(r[name] or 0)
        for name, pick in (("min_ts", min), ("max_ts", max), ("min_pos_ts", min), ("first", min)):
            val = r[name]
            if val is not None:
                val = (val["offset"], val["timestamp"]) if name == "first" else val
                cur[name] = val if cur[name] is None else pick(cur[name], val)
    for cur in per_segment.values():
        first = cur.pop("first")
        cur["first_ts"] = first[1] if first is not None else None

    def total(name):
        return int(sum((p[name] or 0) for p in per_segment.values()))
    stats = {"records_read": total("read"), "records_written": total("kept"),
             "tombstones_stamped": total("stamped"), "tombstones_removed": total("removed_tomb"),
             "bytes_read": total("bytes_read"), "bytes_written": total("kept_bytes")}
    stats["records_superseded"] = stats["records_read"] - stats["records_written"] - stats["tombstones_removed"]
    stats["cleaner_recopy_percent"] = (100.0 * stats["bytes_written"] / stats["bytes_read"]
                                       if stats["bytes_read"] else 0.0)
    return Decision(per_segment, horizons, stats, decided, new_horizon)


def merge_layout(segments: list[Segment], segment_bytes: int) -> list[Segment]:
    """Greedy merge in order: a segment joins the group before it while the total stays <= segment.bytes."""
    groups: list[list[Segment]] = []
    for seg in segments:
        if groups and sum(s.size for s in groups[-1]) + seg.size <= segment_bytes:
            groups[-1].append(seg)
        else:
            groups.append([seg])
    return [g[0] if len(g) == 1 else combine(g) for g in groups]


def _list_written(handle: LogHandle, relative_dir: str) -> dict[int, list[FileRef]]:
    st = handle.st
    out: dict[int, list[FileRef]] = {}
    for entry in st.list_dir(handle.path(relative_dir)):
        if not entry.startswith("seg_idx="):
            continue
        idx = int(entry.split("=", 1)[1])
        for name in st.list_dir(handle.path(f"{relative_dir}/{entry}")):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                rel = f"{relative_dir}/{entry}/{name}"
                meta = pq.read_metadata(handle.path(rel), filesystem=None if st.local else st.fs)
                if meta.num_rows:
                    out.setdefault(idx, []).append(FileRef(rel, meta.num_rows))
    return out


def clean(spark, handle: LogHandle, m: Manifest, config: TopicConfig, u: int, now: int,
          progress=None) -> CleanOutput:
    """Clean `m` (a snapshot) below `u` at `now`; write new files; return what the commit replaces."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    say = progress or (lambda msg: None)
    range_segs = rewritten_segments(m, u)
    if not range_segs:
        stats = {"records_read": 0, "records_written": 0, "tombstones_stamped": 0, "tombstones_removed": 0,
                 "records_superseded": 0, "bytes_read": 0, "bytes_written": 0, "cleaner_recopy_percent": 0.0,
                 "clean_time_secs": time.monotonic() - started}
        # nothing to rewrite: the guard's state carries over unchanged
        return CleanOutput((), (), stats, holds=m.holds, remembered=m.remembered, tombstone_index=m.tombstone_index)
    say(f"deciding winners over {len(range_segs)} segment(s), offsets "
        f"[{range_segs[0].base_offset}, {u})")
    d = decide(spark, handle, m, config, u, now)
    try:
        rewrite = [i for i, p in d.per_segment.items() if p["kept"] < p["read"]]
        written: dict[int, list[FileRef]] = {}
        if rewrite:
            say(f"rewriting {len(rewrite)} of {len(range_segs)} segment(s)")
            out_dir = f"data/clean-{uuid.uuid4().hex}"
            full = read_segments(spark, handle, [(i, m.segments[i]) for i in rewrite], m.log_start_offset)
            survivors = d.decided.where(F.col("keep") & F.col("seg_idx").isin(rewrite)).select(
                "offset", "new_horizon")
            (full.drop("delete_horizon").join(survivors, "offset")
                 .select("offset", "key", "value", "timestamp", "headers",
                         F.col("new_horizon").alias("delete_horizon"), "seg_idx")
                 .repartition(max(1, min(len(rewrite), 64)), "seg_idx")
                 .sortWithinPartitions("seg_idx", "offset")
                 .write.mode("errorifexists").partitionBy("seg_idx").parquet(handle.spark_uri(out_dir)))
            written = _list_written(handle, out_dir)
            for refs in written.values():
                if len(refs) > 1:
                    refs.sort(key=lambda r: r.name)
        new_segments = []
        for i, seg in enumerate(range_segs):
            p = d.per_segment.get(i)
            if p is None:  # a segment with no visible record
                new_segments.append(Segment(new_id(), seg.base_offset, seg.next_offset))
                continue
            if i in rewrite:
                files = tuple(written.get(i, ()))
            elif p["stamped"]:
                files = tuple(FileRef(f.name, f.records, f.stamp if f.stamp is not None else d.new_horizon)
                              for f in seg.files)
            else:
                files = seg.files
            new_segments.append(Segment(
                id=new_id(), base_offset=seg.base_offset, next_offset=seg.next_offset, files=files,
                records=int(p["kept"]), size=int(p["kept_bytes"] or 0), min_ts=p["min_ts"], max_ts=p["max_ts"],
                first_ts=p["first_ts"], min_pos_ts=p["min_pos_ts"], tombstones=int(p["tombstones"]),
                horizons=tuple(sorted(d.horizons.get(i, [])))))
        merged = merge_layout(new_segments, config.segment_bytes)
        out = CleanOutput(tuple(merged), tuple(s.id for s in range_segs), dict(d.stats),
                          files_rewritten=sum(len(v) for v in written.values()))
        if config.strategy != "offset":
            say("updating the tombstone index and remembered deletes")
            _guard_outputs(spark, handle, m, config, d, now, out)
        out.stats["clean_time_secs"] = time.monotonic() - started
        return out
    finally:
        d.decided.unpersist()


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
        (decided.where(F.col("keep") & F.col("tomb"))
            .select("key", "offset", F.col("new_horizon").alias("horizon"), *ranks)
            .coalesce(1).write.parquet(handle.spark_uri(name)))
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
    both.coalesce(1).write.parquet(handle.spark_uri(name))
    summary = spark.read.parquet(handle.spark_uri(name)).agg(
        F.count(F.lit(1)).alias("n"), F.min("m_expiry").alias("e")).collect()[0]
    out.remembered = {"file": name, "count": int(summary["n"]), "min_expiry": int(summary["e"])}
