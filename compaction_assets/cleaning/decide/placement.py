"""Where a cleaning's work runs, within what this process may take: chosen once, before any work.

A cleaning's `Placement` is made once (`place`, called by the cleaner): the route of its decision (probed,
here, or Spark's group-by with its result collected, decided in its tasks or cached), the threads of a
decision made here and of the probe, and whether the kept offsets come here. The phases take it instead
of asking again; the one choice left for later is the write's (`write_threads`), which depends on how many
offsets the decision keeps.

The probe and the write are each one function that runs either as a Spark job of Python workers or in
this process's threads (pyarrow and numpy release the GIL). This process wins when there is little to
read (no Python worker starts, and a Spark Connect server starts new ones for every client session)
and under a local master (its workers would be these cores, plus a process start each and a copy of the
kept offsets through the JVM). A cluster's master runs large work in its workers.

What a cleaning may bring to this process is bounded by the memory it needs, not a row count: the probe's
newer winners (with their keys), a collected decision's winners and a local write's kept offsets each come
here through one Spark collect, within a share of the memory available to this process, its container's
limit included, and within the process's budget (`in_process_memory`: COMPACTION_MEMORY_BUDGET, by default
today's share of the machine's or container's memory; `CleanerTuning.driver_memory_share`; the latest state
is built here within it too), and the driver's result limit (`spark.driver.maxResultSize`, 1 GiB unless
set), each row at its `RowCost` (`fits_here`). A fixed row count would send a large change to a log that
fits here down the general path, grouping every key; a tuning that gives a row limit still has it (tests: -1
sends every log down the general path).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from enum import Enum

from compaction_assets import settings
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.spark.lazy_session import local_cores, result_limit
from compaction_assets.topics.config import TopicConfig

# results up to this size skip asking the session for its limit (a request to a Connect server for
# every small log's cleaning): taken to be below any limit a driver runs with (Spark's default: 1 GiB)
MIN_RESULT_LIMIT = 1 << 20
# the budget's default share of the machine's (or container's) memory: the in-process paths' share
# (CleanerTuning.driver_memory_share), as before there was a budget (COMPACTION_MEMORY_BUDGET)
BUDGET_SHARE = 0.25


@dataclass(frozen=True)
class RowCost:
    """What one row brought here costs: in this process at the peak, and in the job's results."""

    held: int
    shipped: int


def fits_here(spark, rows: int, limit: int, cost: RowCost, share: float, shipped: bool = True) -> bool:
    """Whether `rows` rows of `cost` may come here: at most `limit` when the tuning gives one (-1: none),
    else (0) within `share` of the available memory and, when Spark ships them (`shipped`), within the
    driver's result limit."""
    if limit:
        return rows <= limit
    if rows * cost.held > in_process_memory(share):
        return False
    return not shipped or rows * cost.shipped <= MIN_RESULT_LIMIT or rows * cost.shipped <= result_limit(spark)


def memory_budget(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """COMPACTION_MEMORY_BUDGET, or its default: BUDGET_SHARE of the machine's memory, or of its container's
    limit when lower."""
    budget = settings.current().memory_budget
    return budget if budget is not None else int(BUDGET_SHARE * total_memory(cgroup_root))


def in_process_memory(share: float) -> float:
    """What an in-process path may take: `share` of the memory available now, within the budget."""
    return min(share * available_memory(), memory_budget())


def total_memory(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The machine's memory, or its container's limit when it has a lower one."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file, *_ in _CGROUP_FILES:
        try:
            with open(os.path.join(cgroup_root, limit_file)) as f:
                limit = f.read().strip()
        except OSError:
            continue
        return machine if limit == "max" or not limit.isdigit() else min(machine, int(limit))
    return machine


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


# a collected winner of the offset strategy (its offset and WINNER_FIELDS): about 140 bytes at the peak
# (the Arrow table, then its decision columns)
COLLECTED_WINNER = RowCost(held=140, shipped=40)
# a kept offset that a write here receives: (unit, offset), 12 bytes each
KEPT_OFFSET = RowCost(held=12, shipped=12)
# a kept offset of a decision made in tasks (decide/arrow_decision.py): packed by segment, 8 bytes in the job's
# results; here, the results and the (offset, seg_idx) table made of them, 20 bytes at the peak
TASK_KEPT_OFFSET = RowCost(held=20, shipped=8)

# a range decided here (decide/arrow_decision.py) holds its narrow rows (and the hash of their key) and kept offsets
# whole, about this many bytes a row (nothing comes through Spark's results), and for each thread's bucket
# of keys its group-by, winners and figures, about DECIDING_HERE_ROW_BYTES a row (both rounded up from the
# peaks measured: docs/performance.md)
DECIDED_HERE_ROW_BYTES = 83
DECIDING_HERE_ROW_BYTES = 150
# more buckets than this: the range is decided in Spark (each bucket is a pass of hash tables)
MAX_HERE_BUCKETS = 64


@dataclass(frozen=True)
class HerePlan:
    """How a range is decided in this process: reader threads and buckets of keys (0 threads: in Spark)."""

    threads: int
    buckets: int


def probe_threads(cores: int | None, rows: int, tuning: CleanerTuning) -> int:
    """Threads of this process that probe a prefix of `rows` rows (0: Spark's Python workers do): a
    thread a core under a local master (of `cores`), as the write; elsewhere one when the rows are few."""
    if tuning.local_master_writes_here and cores:
        return cores
    return 1 if rows <= tuning.driver_mark_max_rows else 0


def decide_here_plan(cores: int | None, rows: int, tuning: CleanerTuning) -> HerePlan:
    """Whether a range of `rows` rows is decided here (a thread a core under a local master of `cores`) and in how
    many buckets of keys: of at most the tuning's rows, and as many more as keep the narrow rows and a
    bucket's deciding a thread within the memory share, in whole rounds of a bucket a thread."""
    limit = tuning.local_decision_max_rows
    if limit < 0 or (limit and rows > limit) or not cores:
        return HerePlan(0, 0)
    buckets = max(1, -(-rows // tuning.local_decision_bucket_rows))
    spare = in_process_memory(tuning.driver_memory_share) - rows * DECIDED_HERE_ROW_BYTES
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


def write_threads(
    spark, cores: int | None, rewrite_rows: int, mark_rows: int, kept: int, kept_here: bool, tuning: CleanerTuning
) -> int:
    """Threads of this process that run a cleaning's write (0: Spark's Python workers run it instead), a
    thread a core under a local master of `cores` when a large write's `kept` offsets fit here.
    `kept_here`: the decision's kept offsets are in this process already (collected, or decided here)."""
    if rewrite_rows <= tuning.driver_rewrite_max_rows and mark_rows <= tuning.driver_mark_max_rows:
        return 1
    limit = tuning.local_write_max_kept
    # offsets already here cost no more memory and no result to ship: only a limit the tuning gives applies
    if not tuning.local_master_writes_here or (
        (limit or not kept_here) and not fits_here(spark, kept, limit, KEPT_OFFSET, tuning.driver_memory_share)
    ):
        return 0
    return cores or 0


def newer_winner(record_bytes: int) -> RowCost:
    """A newer winner the probe collects: a collected winner with its key (at most `record_bytes`, the
    newer records' logical bytes a record: key, value and 16 bytes)."""
    return RowCost(COLLECTED_WINNER.held + record_bytes, COLLECTED_WINNER.shipped + record_bytes)


def newer_are_few(span: CleaningRange, tuning: CleanerTuning, max_rows: int | None = None) -> bool:
    """Whether the newer rows are few enough (a share, and `max_rows` when given) to decide only what
    they touch."""
    return (
        bool(span.unique and span.newer)
        and (max_rows is None or span.newer_rows <= max_rows)
        and span.newer_rows <= tuning.incremental_max_dirty_share * span.rows
    )


class DecideAt(Enum):
    """Where a range is decided: the routes of cleaner.py's `decide`, the first four the offset strategy's only."""

    PROBED = "probed"  # the newer rows grouped (here, or by Spark) and the deduplicated prefix probed
    LOCAL = "local"  # the whole range here with Arrow, under a local master (decide/arrow_decision.py)
    COLLECTED_WINNERS = "collected winners"  # grouped by Spark, its winners decided here
    TASKS = "task"  # decided in the tasks of Spark's group-by (decide/arrow_decision.py)
    COLLECTED = "collected"  # the decision's columns worked out by Spark and collected here
    CACHED = "cached"  # ... or cached in Spark

    @property
    def decision(self) -> str:
        """The route as a cleaning's `Route.decision` names it (after the class of its Decision)."""
        return DecideAt.COLLECTED.value if self is DecideAt.COLLECTED_WINNERS else self.value


@dataclass(frozen=True)
class Placement:
    """Where one cleaning's work runs, chosen once before it starts (`place`) from the range's rows and
    bytes, the session's master, the memory available and the tuning. The decide and probe phases take
    it as it is; the write's place depends on the decision's kept offsets, so it is chosen from them, by
    `write_threads`, once the decision is made."""

    decide: DecideAt
    here: HerePlan  # a decision made here: the whole range's (LOCAL) or the newer rows' (PROBED; 0
    # threads: the newer rows grouped by Spark)
    only_touched_keys: bool  # Spark's group-by sees only the keys that the newer rows touch
    probe_threads: int  # PROBED: threads here that probe the prefix (0: Spark's Python workers)
    cores: int | None  # a local master's cores, None under a cluster's master
    reason: str  # the route and why, in a line (a cleaning's `Route` carries it)
    tuning: CleanerTuning = field(default=DEFAULT_TUNING, repr=False, compare=False)

    @property
    def kept_here(self) -> bool:
        """Whether the decision's kept offsets come to this process (every route but a cache in Spark)."""
        return self.decide is not DecideAt.CACHED

    def write_threads(self, spark, rewrite_rows: int, mark_rows: int, kept: int) -> int:
        """Threads of this process that run the write of `rewrite_rows` rows to rewrite and `mark_rows`
        to mark, the decision keeping `kept` offsets (0: Spark's Python workers run it)."""
        return write_threads(spark, self.cores, rewrite_rows, mark_rows, kept, self.kept_here, self.tuning)


def place(spark, config: TopicConfig, span: CleaningRange, tuning: CleanerTuning = DEFAULT_TUNING) -> Placement:
    """Where the cleaning of `span` runs, in the order its routes are preferred: the offset strategy's
    range probed, or decided here, when it fits; else Spark's group-by, its result collected here when it
    fits, or cached in Spark."""
    # the first four routes take a key's newest record as its winner and apply no guard: no rank may compete
    newest_wins = not strategy_of(config).ranked
    cores = local_cores(spark)
    if newest_wins and (newer := _probe_plan(spark, cores, span, tuning)) is not None:
        probe = probe_threads(cores, sum(seg.physical_rows for _, seg in span.unique if seg.records), tuning)
        return _placed(DecideAt.PROBED, span, cores, tuning, newer, True, probe)
    if newest_wins and (here := decide_here_plan(cores, span.rows, tuning)).threads:
        return _placed(DecideAt.LOCAL, span, cores, tuning, here)
    touched = span.rows >= tuning.incremental_min_rows and newer_are_few(
        span, tuning, tuning.incremental_max_dirty_rows
    )
    return _placed(_in_spark(spark, newest_wins, span, tuning), span, cores, tuning, HerePlan(0, 0), touched)


def _probe_plan(spark, cores: int | None, span: CleaningRange, tuning: CleanerTuning) -> HerePlan | None:
    """Whether the offset strategy's range is probed (None: not) and how its newer rows find their
    winners: in this process (a plan with threads) or by Spark (none), their winners with their keys
    brought here within the memory available."""
    if not newer_are_few(span, tuning):
        return None
    records = sum(s.records for _, s in span.newer)
    # a newer winner costs a collected winner and its key: at most the newer records' bytes a record
    record_bytes = -(-sum(s.size for _, s in span.newer) // records) if records else 0
    here = decide_here_plan(cores, span.newer_rows, tuning)
    shipped = not here.threads
    cost = newer_winner(record_bytes)
    fits = fits_here(spark, span.newer_rows, tuning.probe_max_newer_rows, cost, tuning.driver_memory_share, shipped)
    return here if fits else None


def _in_spark(spark, newest_wins: bool, span: CleaningRange, tuning: CleanerTuning) -> DecideAt:
    """Where a range that Spark groups is decided: its winners or its decision collected here, the
    decision made in the group-by's tasks (when a key's newest record wins), or cached in Spark."""
    share = tuning.driver_memory_share
    if newest_wins and _collects(spark, span.rows, tuning.collect_offset_decision_max_rows, share):
        return DecideAt.COLLECTED_WINNERS
    if newest_wins and fits_here(spark, span.rows, tuning.task_decision_max_rows, TASK_KEPT_OFFSET, share):
        return DecideAt.TASKS
    if _collects(spark, span.rows, tuning.collect_decision_max_rows, share):
        return DecideAt.COLLECTED
    return DecideAt.CACHED


def _collects(spark, rows: int, max_rows: int, share: float) -> bool:
    """Whether a range's decision comes here in one job: up to `max_rows` rows (where collecting stops
    beating a cache in Spark) and only when a winner a row fits the memory available."""
    return rows <= max_rows and fits_here(spark, rows, 0, COLLECTED_WINNER, share)


# why each route was taken, completed with the range's rows and the plan's threads
_REASONS = {
    DecideAt.PROBED: "{newer} newer rows of {rows} above a deduplicated prefix, their winners fit here: "
    "newer rows grouped {grouped}, prefix probed {probed}",
    DecideAt.LOCAL: "{rows} rows fit this process under a local master: decided here in {threads} thread(s), "
    "{buckets} bucket(s) of keys",
    DecideAt.COLLECTED_WINNERS: "{rows} rows, their winners fit here: grouped by Spark, decided here",
    DecideAt.TASKS: "{rows} rows, too many to collect: decided in the tasks of Spark's group-by",
    DecideAt.COLLECTED: "{rows} rows, their decision fits here: worked out by Spark, collected here",
    DecideAt.CACHED: "{rows} rows, too many to collect or too little memory: decided and cached in Spark",
}


def _placed(
    at: DecideAt,
    span: CleaningRange,
    cores: int | None,
    tuning: CleanerTuning,
    here: HerePlan,
    touched: bool = False,
    probe: int = 0,
) -> Placement:
    """The placement of route `at`, with its reason."""
    reason = _REASONS[at].format(
        rows=span.rows,
        newer=span.newer_rows,
        threads=here.threads,
        buckets=here.buckets,
        grouped=f"here in {here.threads} thread(s)" if here.threads else "by Spark",
        probed=f"here in {probe} thread(s)" if probe else "in Spark's Python workers",
    )
    if touched and at is not DecideAt.PROBED:
        reason += " (only the keys the newer rows touch grouped)"
    return Placement(at, here, touched, probe, cores, reason, tuning)
