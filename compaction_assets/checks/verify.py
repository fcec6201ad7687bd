"""Independent verification of a cleaning (the asset checks): compare the log before and after.

Each function takes the manifest the cleaning read (`before`), the one it committed (`after`), the
first uncleanable offset `u` and `now`, recomputes what SPEC §6 requires from the records of `before`
with plain Spark (a row_number window, not the cleaner's own code), and returns a CheckOutcome.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction_assets.checks import specs
from compaction_assets.cleaning.planner import evaluate, rewritten_segments
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.ranking import rank_columns, spark_loses, with_spark_ranks
from compaction_assets.log.reader import read_segments, remembered_df
from compaction_assets.log.store import LogHandle

EXAMPLES = 5


@dataclass
class CheckOutcome:
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def _range(spark, handle: LogHandle, m: Manifest, config: TopicConfig, lo: int | None = None, hi: int | None = None):
    from pyspark.sql import functions as F

    segs = [(i, s) for i, s in enumerate(m.segments) if s.files
            and (hi is None or s.base_offset < hi) and (lo is None or s.next_offset > lo)]
    df = read_segments(spark, handle, m, segs)
    if lo is not None:
        df = df.where(F.col("offset") >= lo)
    if hi is not None:
        df = df.where(F.col("offset") < hi)
    return with_spark_ranks(df, config)


def _expected_winners(spark, handle, before: Manifest, config: TopicConfig, u: int):
    """Winner per key of the rewritten range of `before`, by the strategy (row_number, highest first)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    hi = rewritten_segments(before, u)[-1].next_offset if rewritten_segments(before, u) else before.log_start_offset
    df = _range(spark, handle, before, config, hi=hi)
    order = [F.col(c).desc() for c in rank_columns(config)] + [F.col("offset").desc()]
    w = Window.partitionBy("key").orderBy(*order)
    return df.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn"), hi


def _counts(**frames) -> dict[str, int]:
    """Row counts of several DataFrames in one Spark job (shared sub-plans are computed once)."""
    from functools import reduce

    from pyspark.sql import functions as F

    parts = [df.select(F.lit(name).alias("kind")) for name, df in frames.items()]
    rows = reduce(lambda a, b: a.unionByName(b), parts).groupBy("kind").count().collect()
    found = {r["kind"]: int(r["count"]) for r in rows}
    return {name: found.get(name, 0) for name in frames}


def _examples(df, cols) -> list:
    return [{c: (r[c].decode("utf-8", "replace") if isinstance(r[c], (bytes, bytearray)) else r[c]) for c in cols}
            for r in df.select(*cols).limit(EXAMPLES).collect()]


def latest_value_per_key(spark, handle: LogHandle, config: TopicConfig, before: Manifest, after: Manifest,
                         first_uncleanable: int, now: int) -> CheckOutcome:
    """Every key of the rewritten range keeps exactly its winner (SPEC §6), recomputed from `before`."""
    from pyspark.sql import functions as F

    winners, hi = _expected_winners(spark, handle, before, config, first_uncleanable)
    out = _range(spark, handle, after, config, hi=hi)
    w = winners.select("key", F.col("offset").alias("w_offset"), F.col("value").alias("w_value"), *rank_columns(config))
    o = out.select("key", F.col("offset").alias("o_offset"), F.col("value").alias("o_value"))
    joined = o.join(w, "key", "left")
    stale = joined.where(F.col("w_offset").isNull() | (F.col("o_offset") != F.col("w_offset")) |
                         ~F.col("o_value").eqNullSafe(F.col("w_value")))
    dupes = o.groupBy("key").count().where("count > 1")
    missing = w.where(F.col("w_value").isNotNull()).join(o, "key", "left_anti")
    rem = remembered_df(spark, handle, before) if config.strategy != "offset" else None
    if rem is not None:  # a winner that loses to a remembered delete may legitimately go
        missing = missing.join(rem, "key", "left").where(F.col("m_offset").isNull() | ~spark_loses(config, "", "m_"))
    c = _counts(stale=stale, dupes=dupes, missing=missing, keys=w)
    n_stale, n_dupes, n_missing = c["stale"], c["dupes"], c["missing"]
    meta = {"keys_checked": c["keys"], "records_not_the_winner": n_stale, "keys_with_several_records": n_dupes,
            "winning_values_missing": n_missing, "first_uncleanable_offset": first_uncleanable}
    if n_stale:
        meta["examples_not_the_winner"] = _examples(stale, ["key", "o_offset", "w_offset"])
    if n_missing:
        meta["examples_missing"] = _examples(missing, ["key", "w_offset"])
    ok = not (n_stale or n_dupes or n_missing)
    return CheckOutcome(ok, "every key keeps exactly its winner" if ok else
                        f"{n_stale} record(s) are not their key's winner, {n_dupes} key(s) appear more than once, "
                        f"{n_missing} winning value(s) are missing", meta)


def tombstone_retention(spark, handle: LogHandle, config: TopicConfig, before: Manifest, after: Manifest,
                        first_uncleanable: int, now: int) -> CheckOutcome:
    """Tombstones kept until their delete horizon and removed after it, unless held; no deleted key back."""
    from pyspark.sql import functions as F

    winners, hi = _expected_winners(spark, handle, before, config, first_uncleanable)
    out = _range(spark, handle, after, config, hi=hi)
    ranks = rank_columns(config)
    tomb_w = winners.where(F.col("value").isNull())
    # 1. a winning tombstone whose horizon has not passed must still be there
    early = tomb_w.where(F.col("delete_horizon").isNull() | (F.col("delete_horizon") > now)).join(
        out.select("offset"), "offset", "left_anti")
    # 2. a kept tombstone whose horizon passed must be held by a losing record at or above u
    expired_kept = out.where(F.col("value").isNull() & F.col("delete_horizon").isNotNull() &
                             (F.col("delete_horizon") <= now))
    if config.strategy != "offset":
        above = _range(spark, handle, after, config, lo=first_uncleanable).select(
            "key", *[F.col(c).alias("o_" + c) for c in ranks])
        holders = expired_kept.select("key", "offset", *[F.col(c).alias("t_" + c) for c in ranks]).join(
            above, "key").where(spark_loses(config, "o_", "t_")).select("offset").distinct()
        expired_kept = expired_kept.join(holders, "offset", "left_anti")
    # 3. no deleted key brought back: a value in the output for a key whose winner was a tombstone
    back = out.where(F.col("value").isNotNull()).select("key", "offset").join(
        tomb_w.select("key"), "key", "left_semi")
    c = _counts(early=early, late=expired_kept, back=back, tombs=tomb_w)
    n_early, n_late, n_back = c["early"], c["late"], c["back"]
    meta = {"winning_tombstones": c["tombs"], "removed_before_horizon": n_early,
            "kept_after_horizon": n_late, "deleted_keys_brought_back": n_back, "now": now}
    if n_early:
        meta["examples_removed_early"] = _examples(early, ["key", "offset", "delete_horizon"])
    if n_late:
        meta["examples_kept_late"] = _examples(expired_kept, ["key", "offset", "delete_horizon"])
    if n_back:
        meta["examples_brought_back"] = _examples(back, ["key", "offset"])
    ok = not (n_early or n_late or n_back)
    return CheckOutcome(ok, "tombstones kept until their horizon and removed after it" if ok else
                        f"{n_early} removed before the horizon, {n_late} kept after it, {n_back} key(s) brought back",
                        meta)


def offsets_and_order_preserved(spark, handle: LogHandle, config: TopicConfig, before: Manifest, after: Manifest,
                                first_uncleanable: int, now: int) -> CheckOutcome:
    """Surviving offsets are a subset of the input's, in order; nothing at or above the first uncleanable offset changed."""
    from pyspark.sql import functions as F

    problems: list[str] = []
    # the layout: segments tile [first base, LEO) and hold their records in order
    for a, b in zip(after.segments, after.segments[1:]):
        if a.next_offset != b.base_offset:
            problems.append(f"segments [{a.base_offset},{a.next_offset}) and [{b.base_offset},{b.next_offset}) "
                            "do not meet")
    if after.log_end_offset < before.log_end_offset:
        problems.append(f"the log end offset moved back from {before.log_end_offset} to {after.log_end_offset}")
    records = _range(spark, handle, after, config).select("offset", "seg_idx")
    bounds = spark.createDataFrame([(i, s.base_offset, s.next_offset) for i, s in enumerate(after.segments)],
                                   "seg_idx int, base long, next long")
    outside_df = records.join(F.broadcast(bounds), "seg_idx").where(
        (F.col("offset") < F.col("base")) | (F.col("offset") >= F.col("next")))
    dup_df = records.groupBy("offset").count().where("count > 1")
    # surviving offsets are a subset of the input's
    cols = ["offset", "key", "value", "timestamp", "headers"]
    new = _range(spark, handle, after, config, lo=after.log_start_offset).select(*cols).exceptAll(
        _range(spark, handle, before, config).select(*cols))  # exceptAll: nulls (tombstones) compare equal
    # nothing at or above u changed (records the cleaning could see: below the old log end)
    lo = max(first_uncleanable, after.log_start_offset)
    above_before = _range(spark, handle, before, config, lo=lo, hi=before.log_end_offset).select(*cols)
    above_after = _range(spark, handle, after, config, lo=lo, hi=before.log_end_offset).select(*cols)
    c = _counts(outside=outside_df, dup=dup_df, new=new, gone=above_before.exceptAll(above_after),
                altered=above_after.exceptAll(above_before))
    outside, dup, new_count, changed = c["outside"], c["dup"], c["new"], c["gone"] + c["altered"]
    if outside:
        problems.append(f"{outside} record(s) lie outside their segment's offset range")
    if dup:
        problems.append(f"{dup} offset(s) appear twice")
    if new_count:
        problems.append(f"{new_count} record(s) are not in the input (new or altered)")
    if changed:
        problems.append(f"{changed} record(s) at or above the first uncleanable offset {first_uncleanable} changed")
    meta = {"records_outside_segment": outside, "duplicate_offsets": dup, "records_not_in_input": new_count,
            "records_changed_above_first_uncleanable": changed, "first_uncleanable_offset": first_uncleanable}
    if new_count:
        meta["examples_not_in_input"] = _examples(new, ["offset", "key"])
    ok = not problems
    return CheckOutcome(ok, "offsets and order preserved" if ok else "; ".join(problems), meta)


def max_compaction_delay(spark, handle: LogHandle, config: TopicConfig, before: Manifest, after: Manifest,
                         first_uncleanable: int, now: int) -> CheckOutcome:
    """No dirty record waited longer than max.compaction.lag.ms after the cleaning."""
    ev = evaluate(after, config, now)
    ok = ev.max_compaction_delay_ms == 0
    return CheckOutcome(ok, "within max.compaction.lag.ms" if ok else
                        f"dirty records wait {ev.max_compaction_delay_ms} ms beyond max.compaction.lag.ms "
                        f"({config.max_compaction_lag_ms} ms)",
                        {"max_compaction_delay_ms": ev.max_compaction_delay_ms,
                         "max_compaction_lag_ms": config.max_compaction_lag_ms})


CHECKS = {
    specs.LATEST_VALUE_PER_KEY: latest_value_per_key,
    specs.TOMBSTONE_RETENTION: tombstone_retention,
    specs.OFFSETS_AND_ORDER_PRESERVED: offsets_and_order_preserved,
    specs.MAX_COMPACTION_DELAY: max_compaction_delay,
}
