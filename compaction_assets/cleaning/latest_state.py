"""SPEC §7.5: the latest state of a log, per key its winner, written from the log's records.

A cleaning leaves one visible record per key below its first uncleanable offset (recorded in the
manifest's `last_cleaning` as `unique_keys_below`), so the latest state needs no group-by over that clean
section: its records are winners unless a key appears again in the tail above it. Only the tail and the
clean records of the tail's keys are aggregated; the clean section is a scan (no shuffle of the log).
"""

from __future__ import annotations

from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.ranking import rank_columns, spark_loses, spark_order, with_spark_ranks
from compaction_assets.log.reader import read_segments, remembered_df
from compaction_assets.log.store import LogHandle

UNIQUE_KEYS_BELOW = "unique_keys_below"   # last_cleaning: below this offset every key appears once
BROADCAST_TAIL_KEYS_MAX = 2_000_000       # tails with up to this many records have their keys broadcast


def unique_keys_below(manifest: Manifest) -> int | None:
    """The offset below which the last cleaning left one visible record per key, if the manifest says."""
    value = (manifest.last_cleaning or {}).get(UNIQUE_KEYS_BELOW)
    return int(value) if value is not None else None


def latest_state_df(spark, handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None):
    """SPEC §7.5: per key, its winner over the whole log; tombstoned keys and keys whose winner loses to
    a remembered delete are absent. Columns: key, value, offset, timestamp, headers."""
    from pyspark.sql import functions as F

    manifest = manifest or handle.manifest()
    ranks = rank_columns(config)
    fields = ("offset", "value", "timestamp", "headers", *ranks)
    payload = F.struct(*fields)
    below = unique_keys_below(manifest)
    segments = list(enumerate(manifest.segments))
    clean_segs = [(i, s) for i, s in segments if below is not None and s.next_offset <= below and s.files]
    if not clean_segs:
        df = with_spark_ranks(read_segments(spark, handle, manifest, segments), config)
        best = df.groupBy("key").agg(F.max_by(payload, spark_order(config)).alias("w")).select("key", "w.*")
    else:
        tail_segs = [(i, s) for i, s in segments if s.next_offset > below and s.files]
        clean = with_spark_ranks(read_segments(spark, handle, manifest, clean_segs), config).select("key", *fields)
        if not tail_segs:
            best = clean
        else:
            tail = with_spark_ranks(read_segments(spark, handle, manifest, tail_segs), config).select("key", *fields)
            tail_keys = tail.select("key").distinct()
            if sum(s.records for _, s in tail_segs) <= BROADCAST_TAIL_KEYS_MAX:
                tail_keys = F.broadcast(tail_keys)
            contested = clean.join(tail_keys, "key", "left_semi").unionByName(tail)
            contested = (contested.groupBy("key").agg(F.max_by(payload, spark_order(config)).alias("w"))
                         .select("key", "w.*"))
            best = clean.join(tail_keys, "key", "left_anti").unionByName(contested)
    best = best.where(F.col("value").isNotNull())
    rem = remembered_df(spark, handle, manifest) if config.strategy != "offset" else None
    if rem is not None:
        best = best.join(rem, "key", "left").where(
            F.col("m_offset").isNull() | ~spark_loses(config, "", "m_"))
    return best.select("key", "value", "offset", "timestamp", "headers")
