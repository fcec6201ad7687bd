"""The compaction strategies (SPEC §6) as objects: what makes a record the winner of its key.

A key's records compete by (rank, offset), the greater winning; a strategy is its rank:

  offset     ()            the highest offset wins
  timestamp  (r_ts,)       the latest timestamp, then the highest offset
  header     (r_hv, r_v)   the highest version in the named header (a record with one beats one without),
                           then the highest offset

Each `CompactionStrategy` gives its rank columns, their computation with Arrow (the driver, small inputs)
and with Spark (the cleaning job and the latest state), the Spark expressions that order and compare
records by them, and whether records compete by rank at all (then the resurrection guard applies).
`strategy_of(config)` gives a topic's object; every value `topics.config.Strategy` accepts must have one,
which this module checks as it is imported, so that a new strategy cannot half exist.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.topics.config import Strategy, TopicConfig

# rank * 10^19 + offset orders exactly as (rank, offset) for any INT64 rank (|rank * 10^19| < 9.3 * 10^37)
# and any offset (below 2^63 < 10^19): see `CompactionStrategy.spark_order_number`
_SHIFT_SQL = "CAST(10000000000000000000 AS DECIMAL(38,0))"  # 10^19
_LOWEST_SQL = "CAST(99999999999999999999999999999999999999 AS DECIMAL(38,0))"  # 10^38 - 1


@dataclass(frozen=True)
class CompactionStrategy(ABC):
    """What every strategy answers; a subclass per strategy names its ranks and computes them."""

    name: ClassVar[Strategy]
    rank_columns: ClassVar[tuple[str, ...]]  # the columns that order one key's records, before the offset

    @property
    def ranked(self) -> bool:
        """Whether records compete by something besides their offset (else the newest record always wins)."""
        return bool(self.rank_columns)

    @property
    def needs_guard(self) -> bool:
        """Whether the resurrection guard applies (holds, the tombstone index, the remembered deletes): a
        record appended later can lose by rank to a tombstone, which must then keep its key deleted after
        a cleaning removes it. Without ranks an appended record always wins, so nothing needs guarding."""
        return self.ranked

    @abstractmethod
    def arrow_ranks(self, table: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
        """The rank columns computed for an Arrow table of records."""

    @abstractmethod
    def with_spark_ranks(self, df: Any) -> Any:
        """The Spark DataFrame of records with the rank columns added."""

    @abstractmethod
    def spark_order_number(self) -> Any:
        """The order of `spark_order` as one DECIMAL(38,0) (None when the offset alone orders records).

        A fixed-width order keeps a group-by's buffers mutable, so Spark aggregates by hash where a
        struct's order forces a sort."""

    def spark_order(self, prefix: str = "") -> Any:
        """A struct that orders records by (rank, offset): its max over a key is the winner."""
        from pyspark.sql import functions as F

        ranks = [F.col(prefix + c) for c in self.rank_columns]
        return F.struct(*ranks, F.col(prefix + "offset").alias("offset"))

    def spark_loses(self, left: str, right: str) -> Any:
        """Spark condition: the record with prefix `left` (at a higher offset) loses to `right` by rank."""
        from pyspark.sql import functions as F

        if not self.ranked:
            return F.lit(False)
        mine = F.struct(*[F.col(left + c) for c in self.rank_columns])
        theirs = F.struct(*[F.col(right + c) for c in self.rank_columns])
        return mine < theirs


@dataclass(frozen=True)
class OffsetStrategy(CompactionStrategy):
    """compaction.strategy offset: the highest offset wins (Kafka's rule)."""

    name = Strategy.OFFSET
    rank_columns = ()

    def arrow_ranks(self, table: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
        return {}

    def with_spark_ranks(self, df: Any) -> Any:
        return df

    def spark_order_number(self) -> Any:
        return None  # the offset itself


@dataclass(frozen=True)
class TimestampStrategy(CompactionStrategy):
    """compaction.strategy timestamp: the latest timestamp wins, then the highest offset."""

    name = Strategy.TIMESTAMP
    rank_columns = ("r_ts",)

    def arrow_ranks(self, table: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
        return {"r_ts": table.column("timestamp")}

    def with_spark_ranks(self, df: Any) -> Any:
        from pyspark.sql import functions as F

        return df.withColumn("r_ts", F.col("timestamp"))

    def spark_order_number(self) -> Any:
        from pyspark.sql import functions as F

        offset = F.col("offset").cast("decimal(38,0)")
        return F.col("r_ts").cast("decimal(38,0)") * F.expr(_SHIFT_SQL) + offset


@dataclass(frozen=True)
class HeaderStrategy(CompactionStrategy):
    """compaction.strategy header: the highest version in the header `version_header` wins, then the highest
    offset; a record without a version (no such header, or not 8 bytes) loses to every versioned one."""

    version_header: str
    name = Strategy.HEADER
    rank_columns = ("r_hv", "r_v")

    def arrow_ranks(self, table: pa.Table) -> dict[str, pa.Array | pa.ChunkedArray]:
        version = arrow_header_versions(table.column("headers"), self.version_header)
        return {"r_hv": pc.is_valid(version), "r_v": pc.fill_null(version, 0)}

    def with_spark_ranks(self, df: Any) -> Any:
        from pyspark.sql import functions as F

        df = df.withColumn("_version", spark_header_version(F.col("headers"), self.version_header))
        return (
            df.withColumn("r_hv", F.col("_version").isNotNull())
            .withColumn("r_v", F.coalesce(F.col("_version"), F.lit(0).cast("long")))
            .drop("_version")
        )

    def spark_order_number(self) -> Any:
        from pyspark.sql import functions as F

        # a record without a version sits below every version: offset - (10^38 - 1)
        offset = F.col("offset").cast("decimal(38,0)")
        versioned = F.col("r_v").cast("decimal(38,0)") * F.expr(_SHIFT_SQL) + offset
        return F.when(F.col("r_hv"), versioned).otherwise(offset - F.expr(_LOWEST_SQL))


# --- the version header, decoded -----------------------------------------------------------------


def arrow_header_versions(headers: pa.ChunkedArray | pa.Array, name: str) -> pa.Array:
    """Per row: the last header `name` as an 8-byte big-endian signed long, or null (no version)."""
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks() if headers.num_chunks else pa.array([], headers.type)
    n = len(headers)
    out = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    headers = pc.fill_null(headers, pa.scalar([], type=headers.type)) if headers.null_count else headers
    flat = headers.flatten()
    if len(flat):
        parents = pc.list_parent_indices(headers).to_numpy()
        names = flat.field("name").to_numpy(zero_copy_only=False)
        values = flat.field("value").to_pylist()
        match = np.flatnonzero(names == name)
        if match.size:
            p = parents[match]
            last = match[np.append(p[1:] != p[:-1], True)]  # last matching header per row
            for i in last:
                v = values[i]
                row = parents[i]
                if v is not None and len(v) == 8:
                    out[row] = int.from_bytes(v, "big", signed=True)
                    valid[row] = True
    return pa.array(out, pa.int64(), mask=~valid)


def spark_header_version(headers_col: Any, name: str) -> Any:
    """Spark column: the last header `name` decoded as a signed 8-byte big-endian long, else null."""
    from pyspark.sql import functions as F

    matching = F.filter(headers_col, lambda h: h["name"] == F.lit(name))
    value = F.when(F.size(matching) > 0, F.element_at(matching, -1)["value"])

    def half(start: int) -> Any:
        return F.conv(F.hex(F.substring(value, start, 4)), 16, 10).cast("long")

    hi = half(1)
    hi_signed = F.when(hi >= F.lit(2**31), hi - F.lit(2**32)).otherwise(hi)
    return F.when(F.length(value) == 8, hi_signed * F.lit(2**32) + half(5))


# --- a topic's strategy --------------------------------------------------------------------------

OFFSET = OffsetStrategy()
TIMESTAMP = TimestampStrategy()


def _header_strategy(config: TopicConfig) -> CompactionStrategy:
    """The header strategy of `config`, with its version header (`build_config` requires one)."""
    assert config.strategy_header is not None, "compaction.strategy header names its header"
    return HeaderStrategy(config.strategy_header)


# the object each configured compaction.strategy stands for
BUILDERS: dict[str, Callable[[TopicConfig], CompactionStrategy]] = {
    Strategy.OFFSET: lambda config: OFFSET,
    Strategy.TIMESTAMP: lambda config: TIMESTAMP,
    Strategy.HEADER: _header_strategy,
}


def require_every_strategy(
    builders: dict[str, Callable[[TopicConfig], CompactionStrategy]], names: Iterable[str]
) -> None:
    """Refuse a configurable strategy without an object here: its tables would be cleaned by no rule."""
    missing = [str(name) for name in names if name not in builders]
    if missing:
        raise NotImplementedError(
            f"compaction.strategy {', '.join(missing)} has no strategy object in compaction_assets/log/strategies.py"
        )


require_every_strategy(BUILDERS, Strategy)


def strategy_of(config: TopicConfig) -> CompactionStrategy:
    """The strategy object of a topic's configuration."""
    return BUILDERS[config.strategy](config)


def losers_to_tombstones(
    index: pa.Table, records: pa.Table, strategy: CompactionStrategy
) -> list[tuple[int, int, int]]:
    """(tombstone offset, horizon, highest losing record offset) for indexed tombstones that appended
    records would lose to. `index` has key, offset, horizon and the strategy's rank columns."""
    ranks = strategy.arrow_ranks(records)
    probe = pa.table(
        {"key": records.column("key"), "p_offset": records.column("offset"), **{f"p_{k}": v for k, v in ranks.items()}}
    )
    joined = probe.join(index, keys="key", join_type="inner")
    if len(joined) == 0:
        return []
    rows = joined.to_pylist()
    best: dict[int, tuple[int, int]] = {}
    cols = strategy.rank_columns
    for row in rows:
        mine = tuple(row[f"p_{c}"] for c in cols)
        theirs = tuple(row[c] for c in cols)
        if mine < theirs:  # the appended record loses (its offset is higher, so ties go to it)
            t = row["offset"]
            best[t] = (row["horizon"], max(row["p_offset"], best.get(t, (0, -1))[1]))
    return sorted((t, h, u) for t, (h, u) in best.items())
