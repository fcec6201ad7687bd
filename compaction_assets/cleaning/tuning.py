"""How a cleaning chooses its paths: one frozen value, built once and passed down from `engine.run`.

Kafka's `CleanerConfig` holds its cleaner's sizes; this holds ours. Every field is a threshold between a
fast path and its general twin (both give the same log, pinned by tests/cleaning/test_small_and_large_paths.py),
and its comment says why its fast path wins (the figures measured: docs/performance.md). Tests pass their
own (`dataclasses.replace(DEFAULT_TUNING, ...)`) to send small logs through the paths of large ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction_assets.log.spark_reads import DEFAULT_READS, ReadPaths

if TYPE_CHECKING:
    from compaction_assets.cleaning.decide.decision import Decision


@dataclass(frozen=True)
class CleanerTuning:
    """The thresholds a cleaning decides and writes by (what each default won: docs/performance.md)."""

    # a segment is rewritten once this share of its rows is dead; below, its removed offsets go to the
    # deletion vector (a cleaning's writes follow what changed, not the log's size)
    rewrite_dead_fraction: float = 0.5
    # ... but a segment the deletion vector does not list yet is marked only below this share (at most
    # `rewrite_dead_fraction`): one between the two would cross the rewrite line after little more churn
    # (1% new records of 10 a key kill about a tenth of its live rows), so its vector entries would be
    # written for nothing and its dead rows read by every probe and latest state until then
    first_mark_dead_fraction: float = 0.4
    # a range grouped by Spark is decided in one partition per this many rows (at least two), up to the
    # session's shuffle partitions: a task per shuffle partition would cost a small range more than its
    # rows do
    rows_per_partition: int = 100_000
    # ... and one task's group-by holds at most this many rows' keys: a larger range is hashed into more
    # partitions than the session's (under a local master the tasks' hash aggregations share the Spark
    # driver's heap, two at once: more keys a task spill or run it out of memory, fewer pay more tasks)
    group_task_max_rows: int = 500_000
    # the write job: a task per this many rows of the segments it reads
    rows_per_apply_task: int = 250_000
    # writes reading up to this many rows to rewrite (and this many to mark) run in this process, not in
    # Python workers (no worker start: a Spark Connect server starts new ones per client session)
    driver_rewrite_max_rows: int = 100_000
    driver_mark_max_rows: int = 2_000_000
    # keys read (a few files, on the driver) to judge whether a partial aggregation pays
    key_sample_rows: int = 50_000
    key_sample_max_files: int = 4
    # a sample at least this distinct: the group-by shuffles rows as they are (a partial aggregation would
    # hash every row and reduce few of them)
    distinct_skips_partial: float = 0.85
    # a range whose rows above the deduplicated prefix are at most this share groups only the keys they
    # touch, or probes the prefix (a cleaning after 1% new shuffles about 2% of the rows, not all of them)
    incremental_max_dirty_share: float = 0.5
    # ... and, to group the touched keys (the timestamp and header strategies), at most this many rows:
    # their keys are broadcast to every task
    incremental_max_dirty_rows: int = 2_000_000
    # ... in a range of at least this many rows: below, grouping every key costs less than finding the
    # touched keys and broadcasting them first
    incremental_min_rows: int = 5_000_000
    # a range of at most this many rows brings its decision (narrow, a row a key) to this process in one
    # job: no cache, no second job (a request to a Connect server saved); only when its winners fit the
    # memory available, as the probe (placement.py), else the decision is cached in Spark
    collect_decision_max_rows: int = 1_000_000
    # the same for the offset strategy, whose decision has no key: at most a winner a row, about 140 bytes
    # each at the peak; no plan compiled per cleaning (decide.grouped.collected_offset_decision). A crossover,
    # not a memory bound: above it, bringing every winner through the driver costs more than caching the
    # decision in Spark or deciding it in the group-by's tasks
    collect_offset_decision_max_rows: int = 5_000_000
    # a larger range of the offset strategy is decided in the tasks of its group-by (decide/arrow_decision.py), only
    # the figures and the kept offsets (8 bytes each) coming here, when at most this many rows, 0: as many
    # as fit (placement.py), -1: none (the decision is cached in Spark). No cache of every winner and no
    # second job for the kept offsets
    task_decision_max_rows: int = 0
    # under a local master, the offset strategy's range is decided in this process with Arrow
    # (decide/arrow_decision.py), a thread a core, when at most this many rows, 0: as many as fit (placement.py),
    # -1: none. Spark's tasks would run on the same cores, behind a shuffle of every narrow row
    local_decision_max_rows: int = 0
    # ... its keys in buckets of at most this many rows, each bucket's winners found apart (hash tables of
    # cache-friendly size), and in more when the memory share needs it (placement.py: deciding holds one
    # bucket's group-by a thread, not the whole range's)
    local_decision_bucket_rows: int = 4_000_000
    # the offset strategy probes the deduplicated prefix (probe_task.py) when at most this many newer
    # rows lie above it, 0: as many as their winners fit in this process (placement.py): the prefix's rows
    # are read and tested where they lie, not shuffled to a group-by with the newer ones
    probe_max_newer_rows: int = 0
    # what the paths chosen by memory (0 above and below) may bring to this process: this share of the
    # memory available when the cleaning decides, within the driver's result limit (placement.py; the rest
    # is the Spark driver's, the other cleanings' of a fleet and the page cache's)
    driver_memory_share: float = 0.25
    # the probe reads and tests segments this many rows at a time, all columns at once (about 4 MB: a batch
    # stays in the cores' caches, where keys and columns held whole would not)
    probe_batch_rows: int = 65_536
    # ... and while the newer records' keys are being found, each probe thread reads and hashes up to this
    # many rows ahead, then waits (about 100 bytes a row held: 25 MB a thread; more rows a thread touch
    # more memory than the wait they save)
    probe_read_ahead_rows: int = 262_144
    # a local master's large writes (and probes) run in this process, a thread a core (Python workers would
    # run on the same cores, each paying a process start and a copy of the kept offsets through the JVM) ...
    local_master_writes_here: bool = True
    # ... when their kept offsets (12 bytes each here) are at most this many, 0: as many as fit (placement.py)
    local_write_max_kept: int = 0
    # a cleaning adds its entries to the deletion vector as a new file up to this many files (written in
    # proportion to the change, not to the vector); beyond, or when most entries are stale, the vector is
    # rebuilt whole
    dead_vector_max_files: int = 8
    # how the cleaning's Spark reads go (the stamp lookup's buckets, Spark's reader or Python workers
    # for local files): the reader's own paths, each with its reason in log/reader.py
    reads: ReadPaths = DEFAULT_READS
    # which segments are rewritten and which marked, from the decision: None is layout.rewrite_plan; a
    # test hands a wrong plan here to see the checks catch a wrong cleaning (no module patched)
    rewrite_plan: Callable[[Decision, CleanerTuning], tuple[list[int], list[int]]] | None = None


DEFAULT_TUNING = CleanerTuning()
