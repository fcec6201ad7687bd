"""Where a cleaning's work runs: Spark's Python workers, or threads of this process.

The probe and the write are each one function that runs either as a Spark job of Python workers or in
this process's threads (pyarrow and numpy release the GIL). This process wins when there is little to
read (no Python worker starts, and a Spark Connect server starts new ones for every client session,
about a second) and under a local master (its workers would be these cores, plus a process start each
and a copy of the kept offsets through the JVM: a forced cleaning of 5M records wrote in 2.0 s here,
4.3 s there). A cluster's master runs large work in its workers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from compaction_assets.cleaning.memory import KEPT_OFFSET, fits_here
from compaction_assets.cleaning.tuning import CleanerTuning
from compaction_assets.spark import local_master_cores


def probe_threads(spark, rows: int, tuning: CleanerTuning) -> int:
    """Threads of this process that probe a prefix of `rows` rows (0: Spark's Python workers do): a
    thread a core under a local master, as the write; elsewhere one when the rows are few."""
    if tuning.local_master_writes_here and (cores := local_cores(spark)):
        return cores
    return 1 if rows <= tuning.driver_mark_max_rows else 0


def write_threads(spark, rewrite_rows: int, mark_rows: int, kept: int, tuning: CleanerTuning) -> int:
    """Threads of this process that run a cleaning's write (0: Spark's Python workers run it instead)."""
    if rewrite_rows <= tuning.driver_rewrite_max_rows and mark_rows <= tuning.driver_mark_max_rows:
        return 1
    if not tuning.local_master_writes_here or not fits_here(spark, kept, tuning.local_write_max_kept, KEPT_OFFSET,
                                                             tuning.driver_memory_share):
        return 0
    return local_cores(spark) or 0


def local_cores(spark) -> int | None:
    """The cores a local master runs tasks on (capped by this machine's), None for a cluster's master.

    Through Spark Connect the server's master is asked; a local server's tasks share a machine with its
    clients (scripts/spark-connect.sh starts one on 127.0.0.1)."""
    try:
        master = spark.conf.get("spark.master") or ""
    except Exception:  # a session that does not show its master: treat it as a cluster
        return None
    return local_master_cores(master)


def thread_shares(table: pa.Table, unit_rows: dict[int, int], threads: int) -> list[pa.Table]:
    """`table` (unit, offset) cut into the shares of at most `threads` threads, its units spread by the rows
    they read; each share is one task's (so one part of the deletion vector each)."""
    groups = spread(list(unit_rows), list(unit_rows.values()), max(1, min(threads, len(unit_rows))))
    if len(groups) == 1:
        return [table]
    units = table.column("unit").to_numpy()
    # as in Spark, a task sees only the units that have kept offsets (a share without any is empty)
    parts = [part for part in (table.filter(pa.array(np.isin(units, np.array(g, dtype=units.dtype))))
                               for g in groups) if len(part)]
    return parts or [table]


def spread(items: list, weights: list[int], n: int) -> list[list]:
    """`items` in `n` groups of about equal weight: the heaviest first, each onto the lightest group."""
    groups: list[list] = [[] for _ in range(n)]
    loads = [0] * n
    for item, weight in sorted(zip(items, weights), key=lambda pair: -pair[1]):
        at = loads.index(min(loads))
        groups[at].append(item)
        loads[at] += max(weight, 1)
    return groups


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
