"""SPEC §7.5: the latest state of a log, per key its winner, written from the log's records."""

from __future__ import annotations

from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.ranking import rank_columns, spark_loses, spark_order, with_spark_ranks
from compaction_assets.log.reader import read_segments, remembered_df
from compaction_assets.log.store import LogHandle


def latest_state_df(spark, handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None):
    """SPEC §7.5: per key, its winner over the whole log; tombstoned keys and keys whose winner loses to
    a remembered delete are absent. Columns: key, value, offset, timestamp, headers."""
    from pyspark.sql import functions as F

    manifest = manifest or handle.manifest()
    ranks = rank_columns(config)
    df = with_spark_ranks(read_segments(spark, handle, manifest, list(enumerate(manifest.segments))), config)
    payload = F.struct("offset", "value", "timestamp", "headers", *ranks)
    best = df.groupBy("key").agg(F.max_by(payload, spark_order(config)).alias("w")).select("key", "w.*")
    best = best.where(F.col("value").isNotNull())
    rem = remembered_df(spark, handle, manifest) if config.strategy != "offset" else None
    if rem is not None:
        best = best.join(rem, "key", "left").where(
            F.col("m_offset").isNull() | ~spark_loses(config, "", "m_"))
    return best.select("key", "value", "offset", "timestamp", "headers")
