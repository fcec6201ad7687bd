"""The strategies' order as one number (`spark_order_number`, what the cleaning's group-by picks winners
by) sorts records exactly as the struct order (`spark_order`), at the INT64 bounds too (log/strategies.py)."""

from __future__ import annotations

import random

import pytest

from compaction_assets.log.strategies import strategy_of
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.topics.config import build_config

INT64_MIN = -INT64_MAX - 1


def _rows(strategy: str) -> list[tuple]:
    rng = random.Random(13)
    ranks = [INT64_MIN, INT64_MIN + 1, -1, 0, 1, 1_700_000_000_000, INT64_MAX - 1, INT64_MAX]
    offsets = [0, 1, 2, 10**12, INT64_MAX - 1, INT64_MAX]
    rows = [(r, o) for r in ranks for o in offsets]  # every pair of the bounds
    rows += [(rng.choice(ranks[2:6]) + rng.randint(-3, 3), rng.randint(0, 50)) for _ in range(300)]  # ties
    if strategy == "timestamp":
        return [(o, r, None, None) for r, o in rows]
    # the header strategy: a record without a version ranks below every versioned one
    # (with_spark_ranks gives a record without one the version 0)
    out = []
    for r, o in rows:
        versioned = rng.random() < 0.7
        out.append((o, None, versioned, r if versioned else 0))
    return out


@pytest.mark.parametrize("strategy", ["timestamp", "header"])
def test_the_order_as_one_number_sorts_as_the_struct(spark, strategy):

    rule = strategy_of(
        build_config(
            {"compaction.strategy": strategy, "compaction.strategy.header": "version"}
            if strategy == "header"
            else {"compaction.strategy": strategy}
        )
    )
    df = spark.createDataFrame(_rows(strategy), "offset long, r_ts long, r_hv boolean, r_v long")
    got = df.select(
        "offset",
        "r_ts",
        "r_hv",
        "r_v",
        rule.spark_order().alias("by_struct"),
        rule.spark_order_number().alias("by_number"),
    ).collect()
    assert len(got) > 300 and all(r["by_number"] is not None for r in got)
    by_struct = [
        (r["offset"], r["r_ts"], r["r_hv"], r["r_v"]) for r in sorted(got, key=lambda r: tuple(r["by_struct"]))
    ]
    by_number = [(r["offset"], r["r_ts"], r["r_hv"], r["r_v"]) for r in sorted(got, key=lambda r: r["by_number"])]
    assert by_number == by_struct
    assert strategy_of(build_config({})).spark_order_number() is None  # the offset strategy orders by the offset itself
