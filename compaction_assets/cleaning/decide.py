"""Decide (SPEC §6): per key of the rewritten range its winner, and per segment what the cleaning keeps.

A narrow scan (key, offset, rank, tombstone flag, horizon) of the range picks the winner of every key,
applies the delete horizons, the resurrection guard and the remembered deletes, and aggregates per
segment (small results only reach the driver). Only winners can be kept, so the decision is a group-by
over narrow rows. This module chooses the route to the decision, by strategy and size:

  probed     the offset strategy's range whose newer rows are few, above a prefix that the last cleaning
             left with one record per key: the newer rows grouped (here, or by Spark) and the prefix
             probed for the records their keys supersede (probe.py);
  here       the offset strategy's range under a local master, when it fits: Arrow in this process, no
             group-by in Spark (decide_here.py);
  collected  the offset strategy's small range: its winners grouped by Spark, decided here;
  in tasks   the offset strategy's large range: decided in the tasks of the group-by (decide_task.py);
  grouped    the other strategies' (and what the offset strategy's routes above leave): the decision's
             columns worked out by Spark, collected here (a small range) or cached there.
The last three group by Spark (decide_spark.py).

Below the offset under which the last cleaning left one record per key, a key that no newer record of
the range touches is its own winner: under the offset strategy (a newer record always wins) only the
newer rows are grouped and the prefix is probed; under the others, in a large range whose rest is small,
only the touched keys are grouped (the newer rows and the older rows of their keys), so a cleaning after
1% of new records shuffles about 2% of the rows, not all of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from compaction_assets.cleaning.decide_here import decide_here, newer_keys, newer_winners
from compaction_assets.cleaning.decide_spark import (
    cached,
    collected,
    collected_offset_decision,
    decided_in_tasks,
    decision_columns,
    keyed_winners,
    newer_are_few,
    range_winners,
)
from compaction_assets.cleaning.decision import Decision, ProbedDecision
from compaction_assets.cleaning.placement import (
    COLLECTED_WINNER,
    TASK_KEPT_OFFSET,
    HerePlan,
    decide_here_plan,
    fits_here,
    newer_winner,
)
from compaction_assets.cleaning.probe import decide_by_probe
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.log.reader import dead_offsets
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import Strategy, TopicConfig


def decide(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    vector: Callable[[], pa.Array | None] | None = None,
    tuning: CleanerTuning = DEFAULT_TUNING,
) -> Decision:
    """Per key of the range (the planner's `span`) its winner and what happens to it; per segment what the
    cleaning leaves.

    `vector()`, when given, returns the log's deletion vector as `dead_offsets` reads it (a cleaning
    reads it once for the decision and the write)."""
    new_horizon = min(now + config.delete_retention_ms, INT64_MAX)
    offset_strategy = config.strategy == Strategy.OFFSET
    # read when the probe or a decision made here needs it, and once (the cleaner passes its own, cached)
    vector = vector or functools.cache(functools.partial(dead_offsets, handle, manifest))
    if offset_strategy and (newer := _probe_plan(spark, span, tuning)) is not None:
        return _probed(spark, handle, manifest, config, span, now, new_horizon, vector, tuning, newer)
    if offset_strategy and (here := decide_here_plan(spark, span.rows, tuning)).threads:
        return decide_here(handle, manifest, span, now, new_horizon, vector, here.threads, here.buckets)
    found, only_touched = range_winners(spark, handle, manifest, config, span, tuning)
    if offset_strategy and _collects(spark, span, tuning.collect_offset_decision_max_rows, tuning):
        return collected_offset_decision(found, span, now, new_horizon, only_touched)
    if offset_strategy and fits_here(
        spark, span.rows, tuning.task_decision_max_rows, TASK_KEPT_OFFSET, tuning.driver_memory_share
    ):
        return decided_in_tasks(found, span, now, new_horizon, only_touched)
    decided = decision_columns(spark, handle, manifest, config, found, span, now, new_horizon, tuning)
    if _collects(spark, span, tuning.collect_decision_max_rows, tuning):
        return collected(spark, decided, config, span, new_horizon, only_touched)
    return cached(decided, span, new_horizon, only_touched)


@contextmanager
def decided(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    vector: Callable[[], pa.Array | None] | None,
    tuning: CleanerTuning,
) -> Iterator[Decision]:
    """`decide`, and what the decision holds in Spark dropped once the cleaning is done with it."""
    decision = decide(spark, handle, manifest, config, span, now, vector, tuning)
    try:
        yield decision
    finally:
        decision.release()


def _probe_plan(spark, span: CleaningRange, tuning: CleanerTuning) -> HerePlan | None:
    """Whether the offset strategy's range is probed (None: not) and how its newer rows find their
    winners: in this process (a plan with threads) or by Spark (none), their winners with their keys
    brought here within the memory available (placement.py)."""
    if not newer_are_few(span, tuning):
        return None
    cost = newer_winner(_newer_record_bytes(span))
    here = decide_here_plan(spark, span.newer_rows, tuning)
    shipped = not here.threads
    fits = fits_here(spark, span.newer_rows, tuning.probe_max_newer_rows, cost, tuning.driver_memory_share, shipped)
    return here if fits else None


def _probed(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    new_horizon: int,
    vector: Callable[[], pa.Array | None],
    tuning: CleanerTuning,
    newer: HerePlan,
) -> ProbedDecision:
    """The probed decision (probe.py), its newer rows' winners found here as `newer` plans (their keys
    read apart, for the probe to start on), or grouped by Spark when it plans no thread."""
    if newer.threads:
        grouped = functools.partial(newer_winners, handle, manifest, span.newer, vector, newer.threads, newer.buckets)
        key_reader = functools.partial(newer_keys, handle, manifest, span.newer, vector)
        return decide_by_probe(spark, handle, manifest, span, grouped, now, new_horizon, vector(), tuning, key_reader)
    query = keyed_winners(spark, handle, manifest, config, span.newer, span.newer_rows, tuning)
    return decide_by_probe(spark, handle, manifest, span, query.toArrow, now, new_horizon, vector(), tuning)


def _collects(spark, span: CleaningRange, max_rows: int, tuning: CleanerTuning) -> bool:
    """Whether the range's decision comes here in one job: up to `max_rows` rows (where collecting stops
    beating a cache in Spark: 20M rows collected took 425 s against 262-333 s cached) and only when a
    winner a row fits the memory available (placement.py), else it is cached in Spark."""
    return span.rows <= max_rows and fits_here(spark, span.rows, 0, COLLECTED_WINNER, tuning.driver_memory_share)


def _newer_record_bytes(span: CleaningRange) -> int:
    """The newer segments' logical bytes a record (16 bytes, the key and the value): at most a key's."""
    records = sum(s.records for _, s in span.newer)
    return -(-sum(s.size for _, s in span.newer) // records) if records else 0
