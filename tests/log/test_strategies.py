"""The compaction strategies as objects (log/strategies.py): each configured strategy's rank columns and
flags, its Arrow ranks, and a strategy the configuration accepts but that has no object refused loudly."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
import pytest

from compaction_assets.log import strategies
from compaction_assets.log.strategies import (
    HeaderStrategy,
    OffsetStrategy,
    TimestampStrategy,
    require_every_strategy,
    strategy_of,
)
from compaction_assets.topics.config import Strategy, build_config
from compaction_assets.topics.str_enum import StrEnum


def _config(strategy: str):
    extra = {"compaction.strategy.header": "version"} if strategy == "header" else {}
    return build_config({"compaction.strategy": strategy, **extra})


@pytest.mark.parametrize(
    "strategy, kind, columns, ranked",
    [
        ("offset", OffsetStrategy, (), False),
        ("timestamp", TimestampStrategy, ("r_ts",), True),
        ("header", HeaderStrategy, ("r_hv", "r_v"), True),
    ],
)
def test_each_strategy_has_its_ranks_and_flags(strategy, kind, columns, ranked):
    rule = strategy_of(_config(strategy))
    assert type(rule) is kind and rule.name == strategy
    assert rule.rank_columns == columns
    # the guard applies exactly where a later record can lose by rank
    assert rule.ranked is ranked and rule.needs_guard is ranked


def test_the_header_strategy_carries_its_header():
    assert strategy_of(_config("header")) == HeaderStrategy("version")


def test_every_configurable_strategy_has_an_object():
    assert {str(s) for s in Strategy} == set(strategies.BUILDERS)
    for name in Strategy:
        assert strategy_of(_config(name)).name == name


def test_arrow_ranks_give_the_rank_columns():
    version = (7).to_bytes(8, "big", signed=True)
    headers = pa.array(
        [[("version", version)], [], [("version", b"short")]],
        pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())])),
    )
    table = pa.table({"timestamp": pa.array([5, 6, 7], pa.int64()), "headers": headers})
    assert strategy_of(_config("offset")).arrow_ranks(table) == {}
    assert strategy_of(_config("timestamp")).arrow_ranks(table)["r_ts"].to_pylist() == [5, 6, 7]
    ranks = strategy_of(_config("header")).arrow_ranks(table)
    assert ranks["r_hv"].to_pylist() == [True, False, False]  # no header, or not 8 bytes: no version
    assert ranks["r_v"].to_pylist() == [7, 0, 0]


def test_a_strategy_without_an_object_fails_loudly():
    """A value added to the configuration's enumeration without an object here is refused by name."""

    class Grown(StrEnum):  # topics.config.Strategy with one value more
        OFFSET = "offset"
        TIMESTAMP = "timestamp"
        HEADER = "header"
        NEWEST = "newest"

    assert set(Grown) > set(Strategy)
    with pytest.raises(NotImplementedError, match="compaction.strategy newest has no strategy object"):
        require_every_strategy(strategies.BUILDERS, Grown)
    require_every_strategy(strategies.BUILDERS, Strategy)  # the real one: complete


def test_a_strategy_object_must_compute_its_ranks():
    """A subclass that names its ranks but leaves out their computation cannot be made."""

    class Half(strategies.CompactionStrategy):
        name = Strategy.OFFSET
        rank_columns = ("r_half",)

    with pytest.raises(TypeError):
        cast(Any, Half)()  # (typed as the call it is not allowed to be)
