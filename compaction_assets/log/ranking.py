"""Who wins per key (SPEC §6): the strategy's rank, then the offset.

rank(offset strategy)    = ()
rank(timestamp strategy) = (timestamp,)
rank(header strategy)    = (has_version, version)   # a record with a version beats one without
A record beats another when (rank, offset) is greater. The same rule is expressed here for Arrow (the
driver, small inputs) and for Spark (the cleaning job and the latest state).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.segments.arrays import from_numpy, to_numpy
from compaction_assets.segments.keys import key_numbers
from compaction_assets.topics.config import Strategy, TopicConfig

RANK_COLUMNS = {Strategy.OFFSET: (), Strategy.TIMESTAMP: ("r_ts",), Strategy.HEADER: ("r_hv", "r_v")}


def rank_columns(config: TopicConfig) -> tuple[str, ...]:
    """The rank columns that order one key's records for the topic's strategy."""
    return RANK_COLUMNS[config.strategy]


# --- Arrow ---------------------------------------------------------------------------------------


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


def _version_header(config: TopicConfig) -> str:
    """The header that holds a record's version under the header strategy (`build_config` requires one)."""
    assert config.strategy_header is not None, "compaction.strategy header names its header"
    return config.strategy_header


def arrow_ranks(table: pa.Table, config: TopicConfig) -> dict[str, pa.Array]:
    """The strategy's rank columns computed for an Arrow table."""
    if config.strategy == Strategy.TIMESTAMP:
        return {"r_ts": table.column("timestamp")}
    if config.strategy == Strategy.HEADER:
        version = arrow_header_versions(table.column("headers"), _version_header(config))
        return {"r_hv": pc.is_valid(version), "r_v": pc.fill_null(version, 0)}
    return {}


def highest_offsets(table: pa.Table, hashes: np.ndarray | None = None) -> pa.Array:
    """Per row of `table` (key and offset columns): whether it holds its key's highest offset, the
    offset strategy's winner. Offsets are unique, so numbering the keys (one hash pass) and each number's
    highest offset find those rows in place, with no sort of the records (and not with Arrow's group-by,
    whose engine imports pandas: 0.3 s of a cleaning after a few new records)."""
    if not len(table):
        return from_numpy(np.zeros(0, bool))
    # the keys numbered once over all chunks: numbering chunks apart and unifying their dictionaries
    # afterwards took 7.4 s for 4M rows of 2M keys in 40 chunks, against 0.9 s (keys.py: by their hash)
    # (`hashes`: the keys' key_hash, when the caller has it)
    key_number, count = key_numbers(table.column("key"), hashes)
    offsets = to_numpy(table.column("offset"))
    best = np.full(count, np.iinfo(np.int64).min)
    np.maximum.at(best, key_number, offsets)
    return from_numpy(offsets == best[key_number])


def losers_to_tombstones(index: pa.Table, records: pa.Table, config: TopicConfig) -> list[tuple[int, int, int]]:
    """(tombstone offset, horizon, highest losing record offset) for indexed tombstones that appended
    records would lose to. `index` has key, offset, horizon and the strategy's rank columns."""
    ranks = arrow_ranks(records, config)
    probe = pa.table(
        {"key": records.column("key"), "p_offset": records.column("offset"), **{f"p_{k}": v for k, v in ranks.items()}}
    )
    joined = probe.join(index, keys="key", join_type="inner")
    if len(joined) == 0:
        return []
    rows = joined.to_pylist()
    best: dict[int, tuple[int, int]] = {}
    cols = rank_columns(config)
    for row in rows:
        mine = tuple(row[f"p_{c}"] for c in cols)
        theirs = tuple(row[c] for c in cols)
        if mine < theirs:  # the appended record loses (its offset is higher, so ties go to it)
            t = row["offset"]
            best[t] = (row["horizon"], max(row["p_offset"], best.get(t, (0, -1))[1]))
    return sorted((t, h, u) for t, (h, u) in best.items())


# --- Spark ---------------------------------------------------------------------------------------


def spark_header_version(headers_col, name: str):
    """Spark column: the last header `name` decoded as a signed 8-byte big-endian long, else null."""
    from pyspark.sql import functions as F

    matching = F.filter(headers_col, lambda h: h["name"] == F.lit(name))
    value = F.when(F.size(matching) > 0, F.element_at(matching, -1)["value"])

    def half(start):
        return F.conv(F.hex(F.substring(value, start, 4)), 16, 10).cast("long")

    hi = half(1)
    hi_signed = F.when(hi >= F.lit(2**31), hi - F.lit(2**32)).otherwise(hi)
    return F.when(F.length(value) == 8, hi_signed * F.lit(2**32) + half(5))


def with_spark_ranks(df, config: TopicConfig):
    """The DataFrame with the strategy's rank columns added."""
    from pyspark.sql import functions as F

    if config.strategy == Strategy.TIMESTAMP:
        return df.withColumn("r_ts", F.col("timestamp"))
    if config.strategy == Strategy.HEADER:
        df = df.withColumn("_version", spark_header_version(F.col("headers"), _version_header(config)))
        return (
            df.withColumn("r_hv", F.col("_version").isNotNull())
            .withColumn("r_v", F.coalesce(F.col("_version"), F.lit(0).cast("long")))
            .drop("_version")
        )
    return df


def spark_order(config: TopicConfig, prefix: str = ""):
    """A struct that orders records by (rank, offset): its max over a key is the winner."""
    from pyspark.sql import functions as F

    return F.struct(*[F.col(prefix + c) for c in rank_columns(config)], F.col(prefix + "offset").alias("offset"))


def spark_order_number(config: TopicConfig):
    """The order of `spark_order` as one DECIMAL(38,0), for the timestamp and header strategies (None for
    the offset strategy, whose order is the offset itself).

    rank * 10^19 + offset orders exactly as (rank, offset) for any INT64 rank (|rank * 10^19| < 9.3 * 10^37)
    and any offset (below 2^63 < 10^19); a record without a header version sits below every version
    (offset - (10^38 - 1)). A fixed-width order keeps a group-by's buffers mutable, so Spark aggregates
    by hash where a struct's order forces a sort."""
    from pyspark.sql import functions as F

    if config.strategy == Strategy.OFFSET:
        return None
    shift = F.expr("CAST(10000000000000000000 AS DECIMAL(38,0))")  # 10^19
    offset = F.col("offset").cast("decimal(38,0)")
    if config.strategy == Strategy.TIMESTAMP:
        return F.col("r_ts").cast("decimal(38,0)") * shift + offset
    lowest = F.expr("CAST(99999999999999999999999999999999999999 AS DECIMAL(38,0))")  # 10^38 - 1
    return F.when(F.col("r_hv"), F.col("r_v").cast("decimal(38,0)") * shift + offset).otherwise(offset - lowest)


def spark_loses(config: TopicConfig, left: str, right: str):
    """Spark condition: the record with prefix `left` (at a higher offset) loses to `right` by rank."""
    from pyspark.sql import functions as F

    cols = rank_columns(config)
    if not cols:
        return F.lit(False)
    return F.struct(*[F.col(left + c) for c in cols]) < F.struct(*[F.col(right + c) for c in cols])
