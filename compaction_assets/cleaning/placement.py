"""Where a cleaning's work runs: Spark's Python workers, or threads of this process.

The probe and the write are each one function that runs either as a Spark job of Python workers or in
this process's threads (pyarrow and numpy release the GIL). This process wins when there is little to
read (no Python worker starts, and a Spark Connect server starts new ones for every client session,
about a second) and under a local master (its workers would be these cores, plus a process start each
and a copy of the kept offsets through the JVM: a forced cleaning of 5M records wrote in 2.0 s here,
4.3 s there). A cluster's master runs large work in its workers.

What a cleaning may bring to this process is bounded by the memory it needs, not a row count: the probe's
newer winners (with their keys), a collected decision's winners and a local write's kept offsets each come
here through one Spark collect, within a share of the memory this machine has available
(`CleanerTuning.driver_memory_share`) and the driver's result limit (`spark.driver.maxResultSize`, 1 GiB
unless set), each row at its `RowCost`. The row count this replaced (1M newer rows) sent a cleaning after
10% new records of a 20M-record log down the general path, grouping every key (issue 32); a tuning that
gives a row limit still has it (tests: -1 sends every log down the general path).

How a Spark group-by spreads its rows over tasks is chosen here too (`group_partitions`,
`keys_mostly_distinct`): one partition for a small range, hashed by key when a sample of keys says a
partial aggregation would not reduce them, Spark's partial aggregation otherwise, and never more keys a
task than a local master's heap holds.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.segments.arrays import from_numpy, to_numpy
from compaction_assets.spark import local_master_cores
from compaction_assets.spark.lazy_session import LazySession
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Segment

# results up to this size skip asking the session for its limit (a request to a Connect server for
# every small log's cleaning): taken to be below any limit a driver runs with (Spark's default: 1 GiB)
MIN_RESULT_LIMIT = 1 << 20
_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class RowCost:
    """What one row brought here costs: in this process at the peak, and in the job's results."""

    held: int
    shipped: int


# a collected winner of the offset strategy (its offset and WINNER_FIELDS): about 140 bytes at the peak
# (the Arrow table, then its decision columns; 5M distinct keys: 0.4 GB more than caching it in Spark)
COLLECTED_WINNER = RowCost(held=140, shipped=40)
# a kept offset that a write here receives: (unit, offset), 12 bytes each
KEPT_OFFSET = RowCost(held=12, shipped=12)
# a kept offset of a decision made in tasks (decide_task.py): packed by segment, 8 bytes in the job's
# results; here, the results and the (offset, seg_idx) table made of them, 20 bytes at the peak
TASK_KEPT_OFFSET = RowCost(held=20, shipped=8)

# a range decided here (decide_here.py) holds its narrow rows (and the hash of their key) and kept offsets
# whole, about this many bytes a row (nothing comes through Spark's results), and for each thread's bucket
# of keys its group-by, winners and figures, about DECIDING_HERE_ROW_BYTES a row (50M records of distinct
# keys, a bucket at a time: 4.1 GB at the peak in 16 buckets, 4.5 GB in 8, 5.3 GB in 4; two at once in
# 14: 4.7 GiB)
DECIDED_HERE_ROW_BYTES = 83
DECIDING_HERE_ROW_BYTES = 150
# more buckets than this: the range is decided in Spark (each bucket is a pass of hash tables)
MAX_HERE_BUCKETS = 64


@dataclass(frozen=True)
class HerePlan:
    """How a range is decided in this process: reader threads and buckets of keys (0 threads: in Spark)."""

    threads: int
    buckets: int


def probe_threads(spark, rows: int, tuning: CleanerTuning) -> int:
    """Threads of this process that probe a prefix of `rows` rows (0: Spark's Python workers do): a
    thread a core under a local master, as the write; elsewhere one when the rows are few."""
    if tuning.local_master_writes_here and (cores := local_cores(spark)):
        return cores
    return 1 if rows <= tuning.driver_mark_max_rows else 0


def decide_here_plan(spark, rows: int, tuning: CleanerTuning) -> HerePlan:
    """Whether a range of `rows` rows is decided here (a thread a core under a local master) and in how
    many buckets of keys: of at most the tuning's rows, and as many more as keep the narrow rows and a
    bucket's deciding a thread within the memory share, in whole rounds of a bucket a thread."""
    limit = tuning.local_decision_max_rows
    if limit < 0 or (limit and rows > limit) or not (cores := local_cores(spark)):
        return HerePlan(0, 0)
    buckets = max(1, -(-rows // tuning.local_decision_bucket_rows))
    spare = tuning.driver_memory_share * available_memory() - rows * DECIDED_HERE_ROW_BYTES
    if not limit:  # a limit the tuning gives stands for the memory, as in fits_here
        if spare <= 0:
            return HerePlan(0, 0)
        # a bucket a thread is decided at once
        buckets = max(buckets, math.ceil(cores * rows * DECIDING_HERE_ROW_BYTES / spare))
    if buckets > 1:
        # whole rounds of a bucket a thread (20M records in 5 buckets on 2 cores: the fifth decided alone)
        buckets = -(-buckets // cores) * cores
    if not limit and buckets > MAX_HERE_BUCKETS:
        return HerePlan(0, 0)
    return HerePlan(cores, buckets)


def write_threads(spark, rewrite_rows: int, mark_rows: int, kept: int, kept_here: bool, tuning: CleanerTuning) -> int:
    """Threads of this process that run a cleaning's write (0: Spark's Python workers run it instead).
    `kept_here`: the decision's kept offsets are in this process already (collected, or decided here)."""
    if rewrite_rows <= tuning.driver_rewrite_max_rows and mark_rows <= tuning.driver_mark_max_rows:
        return 1
    limit = tuning.local_write_max_kept
    # offsets already here cost no more memory and no result to ship: only a limit the tuning gives applies
    if not tuning.local_master_writes_here or (
        (limit or not kept_here) and not fits_here(spark, kept, limit, KEPT_OFFSET, tuning.driver_memory_share)
    ):
        return 0
    return local_cores(spark) or 0


def local_cores(spark) -> int | None:
    """The cores a local master runs tasks on (capped by this machine's), None for a cluster's master.

    Through Spark Connect the server's master is asked; a local server's tasks share a machine with its
    clients (scripts/spark-connect.sh starts one on 127.0.0.1)."""
    try:
        master = (spark.known_master if isinstance(spark, LazySession) else spark.conf.get("spark.master")) or ""
    except Exception:  # a session that does not show its master: treat it as a cluster
        return None
    return local_master_cores(master)


def thread_shares(table: pa.Table, unit_rows: dict[int, int], threads: int) -> list[pa.Table]:
    """`table` (unit, offset) cut into the shares of at most `threads` threads, its units spread by the rows
    they read; each share is one task's (so one part of the deletion vector each)."""
    groups = spread(list(unit_rows), list(unit_rows.values()), max(1, min(threads, len(unit_rows))))
    if len(groups) == 1:
        return [table]
    units = to_numpy(table.column("unit"))
    # as in Spark, a task sees only the units that have kept offsets (a share without any is empty)
    parts = [
        part
        for part in (table.filter(from_numpy(np.isin(units, np.array(g, dtype=units.dtype)))) for g in groups)
        if len(part)
    ]
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


def group_partitions(grouped_rows: int, session_partitions: int, tuning: CleanerTuning = DEFAULT_TUNING) -> int:
    """The partitions that a group-by of `grouped_rows` rows hashes them into by key before aggregating;
    0: the session's shuffle partitions after a partial aggregation (when a sample of keys says it pays)."""
    if grouped_rows <= tuning.small_range_records:
        return 1
    parts = max(2, -(-grouped_rows // tuning.rows_per_partition))
    if parts < session_partitions:
        # A small range in the session's shuffle partitions (8) is mostly task overhead (17 tasks for a
        # 2,000-record log): as many partitions as its size needs; shuffling every narrow row costs little
        # at this size, and a partial aggregation would barely reduce rows whose keys are mostly distinct.
        return parts
    # A task's hash aggregation holds its keys in the Spark driver's heap under a local master: a range
    # too large for the session's partitions is spread so that no task holds more than
    # `group_task_max_rows` (50M distinct keys in 8 tasks ran a 1 GiB heap out of memory; in 50 they spilled)
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


def newer_winner(record_bytes: int) -> RowCost:
    """A newer winner the probe collects: a collected winner with its key (at most `record_bytes`, the
    newer records' logical bytes a record: key, value and 16 bytes)."""
    return RowCost(COLLECTED_WINNER.held + record_bytes, COLLECTED_WINNER.shipped + record_bytes)


def fits_here(spark, rows: int, limit: int, cost: RowCost, share: float, shipped: bool = True) -> bool:
    """Whether `rows` rows of `cost` may come here: at most `limit` when the tuning gives one (-1: none),
    else (0) within `share` of the available memory and, when Spark ships them (`shipped`), within the
    driver's result limit."""
    if limit:
        return rows <= limit
    if rows * cost.held > share * available_memory():
        return False
    return not shipped or rows * cost.shipped <= MIN_RESULT_LIMIT or rows * cost.shipped <= result_limit(spark)


def available_memory(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """Bytes this process may still take: the machine's available memory, within its container's limit
    when it has one (a container's /proc/meminfo shows the host's memory, and past the limit the kernel
    kills the process instead of reclaiming)."""
    machine, headroom = _machine_available(), _container_headroom(cgroup_root)
    return machine if headroom is None else min(machine, headroom)


def _machine_available() -> int:
    """/proc/meminfo's MemAvailable, or the free pages where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux: the free pages, which leave out the page cache
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# the container's limit, usage and memory statistics: cgroup v2's files, then v1's
_CGROUP_FILES = (
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
)


def _container_headroom(root: str) -> int | None:
    """The memory cgroup's limit less what it holds beyond reclaimable file pages (as the kubelet counts
    a container's working set); None without a limit."""
    for limit_file, usage_file, stat_file, inactive in _CGROUP_FILES:
        try:
            with open(os.path.join(root, limit_file)) as f:
                limit = f.read().strip()
            with open(os.path.join(root, usage_file)) as f:
                usage = int(f.read())
            with open(os.path.join(root, stat_file)) as f:
                cache = next((int(line.split()[1]) for line in f if line.split()[0] == inactive), 0)
        except (OSError, ValueError, IndexError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # v1 writes "no limit" as a page-rounded 2^63
            return None
        return max(0, int(limit) - max(0, usage - cache))
    return None


def result_limit(spark) -> float:
    """spark.driver.maxResultSize in bytes (1 GiB when the session does not say; 0 is unlimited)."""
    try:
        text = spark.conf.get("spark.driver.maxResultSize", "1g") or "1g"
    except Exception:  # a session that does not show its conf: Spark's default
        text = "1g"
    match = _SIZE.fullmatch(text)
    if match is None:
        return float(1 << 30)
    size = int(match.group(1)) * 1024 ** "bkmgtp".index((match.group(2) or "b").lower())
    return float("inf") if size == 0 else float(size)
