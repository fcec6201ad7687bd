"""Reading a log (SPEC §7): from any offset, as a Spark DataFrame or a Python iterator; its latest state."""

from __future__ import annotations

from typing import Iterator

import pyarrow.compute as pc

from .cleaner import read_segments, remembered_df
from .config import TopicConfig
from .manifest import Manifest
from .planner import evaluate
from .records import Record, rows_to_records
from .segment_stats import dead_offsets, read_segment
from .store import LogHandle, wall_ms

COLUMNS = ("offset", "key", "value", "timestamp", "headers", "delete_horizon")


def read_df(spark, handle: LogHandle, from_offset: int = 0, *, ordered: bool = True, m: Manifest | None = None):
    """Visible records at or above `from_offset` (the next surviving one onwards), in offset order."""
    from pyspark.sql import functions as F

    m = m or handle.manifest()
    start = max(from_offset, m.log_start_offset)
    segs = [(i, s) for i, s in enumerate(m.segments) if s.next_offset > start and s.files]
    df = read_segments(spark, handle, m, segs).where(F.col("offset") >= F.lit(start))
    df = df.select(*COLUMNS)
    return df.orderBy("offset") if ordered else df


def iter_records(handle: LogHandle, from_offset: int = 0, m: Manifest | None = None) -> Iterator[Record]:
    """A small-reader iterator over visible records from `from_offset`, one segment in memory at a time."""
    m = m or handle.manifest()
    start = max(from_offset, m.log_start_offset)
    dead = dead_offsets(handle, m)
    for seg in m.segments:
        if seg.next_offset <= start or not seg.files:
            continue
        table = read_segment(handle, seg, m.log_start_offset, dead)
        table = table.filter(pc.greater_equal(table.column("offset"), start))
        yield from rows_to_records(table)


def segment_records(handle: LogHandle, m: Manifest) -> list[tuple[object, list[Record]]]:
    """Every segment with its visible records (for describing small logs and the conformance output)."""
    dead = dead_offsets(handle, m)
    return [(seg, rows_to_records(read_segment(handle, seg, m.log_start_offset, dead)) if seg.files else [])
            for seg in m.segments]


def latest_state_df(spark, handle: LogHandle, config: TopicConfig, m: Manifest | None = None):
    """SPEC §7.5: per key, its winner over the whole log; tombstoned keys and keys whose winner loses to
    a remembered delete are absent. Columns: key, value, offset, timestamp, headers."""
    from pyspark.sql import functions as F

    from .ranking import rank_columns, spark_loses, spark_order, with_spark_ranks

    m = m or handle.manifest()
    ranks = rank_columns(config)
    df = with_spark_ranks(read_segments(spark, handle, m, list(enumerate(m.segments))), config)
    payload = F.struct("offset", "value", "timestamp", "headers", *ranks)
    best = df.groupBy("key").agg(F.max_by(payload, spark_order(config)).alias("w")).select("key", "w.*")
    best = best.where(F.col("value").isNotNull())
    rem = remembered_df(spark, handle, m) if config.strategy != "offset" else None
    if rem is not None:
        best = best.join(rem, "key", "left").where(
            F.col("m_offset").isNull() | ~spark_loses(config, "", "m_"))
    return best.select("key", "value", "offset", "timestamp", "headers")


def describe(handle: LogHandle, config: TopicConfig, now: int | None = None) -> dict:
    """The log as metadata: segments, ranges, sizes, checkpoint, state and today's evaluation."""
    m = handle.manifest()
    now = wall_ms() if now is None else now
    ev = evaluate(m, config, now)
    return {
        "log": handle.name, "version": m.version, "log_start_offset": m.log_start_offset,
        "log_end_offset": m.log_end_offset, "checkpoint": m.checkpoint,
        "records": m.total_records, "size_bytes": m.total_size,
        "segments": [{"base_offset": s.base_offset, "next_offset": s.next_offset, "active": i == len(m.segments) - 1,
                      "records": s.records, "size_bytes": s.size, "files": len(s.files), "min_ts": s.min_ts,
                      "max_ts": s.max_ts, "tombstones": s.tombstones,
                      "horizons": [list(h) for h in s.horizons]} for i, s in enumerate(m.segments)],
        "uncleanable": m.uncleanable, "last_cleaning": m.last_cleaning, "invalid_records": m.invalid_records,
        "remembered_deletes": (m.remembered or {}).get("count", 0), "held_tombstones": len(m.holds),
        "config": config.to_kafka(), "evaluation": ev.as_dict(),
    }
