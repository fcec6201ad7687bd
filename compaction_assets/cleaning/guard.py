"""The resurrection guard's outputs (SPEC §6, timestamp and header strategies): what a cleaning leaves
for later appends and cleanings to read.

  holds             kept tombstones that a record above the range would otherwise bring back;
  tombstone index   the kept tombstones with their horizons (an append checks its records against it);
  remembered        the removed tombstones' keys and ranks until their expiry, so that an older record
                    appended later still loses to a delete it can no longer see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compaction_assets.cleaning.decide.decision import Decision
from compaction_assets.log.side_tables import remembered_df, write_remembered, write_tombstone_index
from compaction_assets.log.strategies import strategy_of
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Hold, Manifest
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class GuardOutputs:
    """The guard's state after a cleaning, as the manifest holds it."""

    holds: tuple[Hold, ...]
    tombstone_index: dict[str, Any] | None
    remembered: dict[str, Any] | None


def guard_outputs(
    spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, decision: Decision, now: int
) -> GuardOutputs:
    """Holds, the tombstone index and the remembered deletes after the cleaning `decision` describes."""
    from pyspark.sql import functions as F

    ranks = strategy_of(config).rank_columns
    decided = decision.guard_rows()
    held = (
        decided.where(F.col("keep") & F.col("tomb") & F.col("until").isNotNull())
        .select("offset", "new_horizon", "until")
        .collect()
    )
    holds = tuple(Hold(int(r["offset"]), int(r["new_horizon"]), int(r["until"])) for r in held)
    index = None
    kept_tombs = sum(p.tombstones for p in decision.figures.values())
    if kept_tombs:
        index = write_tombstone_index(
            handle,
            decided.where(F.col("keep") & F.col("tomb")).select(
                "key", "offset", F.col("new_horizon").alias("horizon"), *ranks
            ),
            kept_tombs,
        )
    return GuardOutputs(holds, index, _remembered(spark, handle, manifest, config, decision, now))


def _remembered(
    spark, handle: LogHandle, manifest: Manifest, config: TopicConfig, decision: Decision, now: int
) -> dict[str, Any] | None:
    """The remembered deletes: the old ones and this cleaning's removed tombstones, the best per key."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    strategy = strategy_of(config)
    ranks = strategy.rank_columns
    expiry = min(now + config.delete_retention_ms, INT64_MAX)
    new = (
        decision.guard_rows()
        .where(F.col("removed_tomb"))
        .select(
            "key",
            *[F.col(c).alias("m_" + c) for c in ranks],
            F.col("offset").alias("m_offset"),
            F.lit(expiry).cast("long").alias("m_expiry"),
        )
    )
    old = remembered_df(spark, handle, manifest)
    if not decision.stats.tombstones_removed:
        return None if old is None else manifest.remembered
    both = new if old is None else new.unionByName(old)
    best = F.max(strategy.spark_order("m_")).over(Window.partitionBy("key"))
    both = both.withColumn("_best", best).where(F.col("_best.offset") == F.col("m_offset")).drop("_best")
    return write_remembered(handle, both)
