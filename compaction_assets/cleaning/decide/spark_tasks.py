"""How the cleaning's Spark jobs spread their rows over tasks: the session's partitions and parallelism,
and the partitions of a group-by by its size and a sample of its keys.

A group-by of a small range runs in as many partitions as its rows need; a larger one is hashed by key
when a sample of keys says a partial aggregation would not reduce them, and left to Spark's partial
aggregation otherwise, and never with more keys a task than a local master's heap holds. The write and the
probe, when they run in Spark's Python workers, take about two tasks a core of the session's parallelism.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Segment


def shuffle_partitions(spark) -> int:
    """The session's shuffle partitions (8 when it does not say)."""
    try:
        return max(1, int(spark.conf.get("spark.sql.shuffle.partitions", "8")))
    except Exception:  # a conf the session refuses to show: its default
        return 8


def parallelism(spark) -> int:
    """The session's default parallelism (its shuffle partitions through Spark Connect)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect: no SparkContext
        return shuffle_partitions(spark)


def group_partitions(grouped_rows: int, session_partitions: int, tuning: CleanerTuning = DEFAULT_TUNING) -> int:
    """The partitions that a group-by of `grouped_rows` rows hashes them into by key before aggregating;
    0: the session's shuffle partitions after a partial aggregation (when a sample of keys says it pays)."""
    parts = max(2, -(-grouped_rows // tuning.rows_per_partition))
    if parts < session_partitions:
        # A small range in the session's shuffle partitions (8) is mostly task overhead (17 tasks for a
        # 2,000-record log): as many partitions as its size needs; shuffling every narrow row costs little
        # at this size, and a partial aggregation would barely reduce rows whose keys are mostly distinct.
        return parts
    # A task's hash aggregation holds its keys in the Spark driver's heap under a local master: a range
    # too large for the session's partitions is spread so that no task holds more than
    # `group_task_max_rows` (more keys a task spill, or run the heap out of memory)
    bounded = -(-grouped_rows // tuning.group_task_max_rows)
    return bounded if bounded > session_partitions else 0


def keys_mostly_distinct(
    handle: LogHandle, segments: list[tuple[int, Segment]], tuning: CleanerTuning = DEFAULT_TUNING
) -> bool:
    """Whether a sample of the keys (up to `key_sample_rows`, from files in the middle of `segments`,
    read on the driver) is at least `distinct_skips_partial` distinct: then a partial aggregation is wasted."""
    files = [ref for _, seg in segments for ref in seg.files]
    start = max(0, len(files) // 2 - tuning.key_sample_max_files // 2)
    chunks, rows = [], 0
    for ref in files[start : start + tuning.key_sample_max_files]:
        if rows >= tuning.key_sample_rows:
            break
        column = handle.st.read_parquet(handle.path(ref.name), columns=["key"]).column("key")
        column = column.slice(0, tuning.key_sample_rows - rows)
        chunks.extend(column.chunks)
        rows += len(column)
    if not rows:
        return False
    return len(pc.unique(pa.chunked_array(chunks))) >= tuning.distinct_skips_partial * rows
