"""Decide (SPEC §6): per key of the rewritten range its winner, and per segment what the cleaning keeps.

A narrow scan (key, offset, rank, tombstone flag, horizon) of the range picks the winner of every key,
applies the delete horizons, the resurrection guard and the remembered deletes, and aggregates per
segment (small results only reach the driver). Only winners can be kept, so the decision is a group-by
over narrow rows. This module takes the route to the decision that the cleaning's `Placement` chose
once, by strategy, size and memory (placement.py's `place`):

  probed     the offset strategy's range whose newer rows are few, above a prefix that the last cleaning
             left with one record per key: the newer rows grouped (here, or by Spark) and the prefix
             probed for the records their keys supersede (probe.py);
  here       the offset strategy's range under a local master, when it fits: Arrow in this process, no
             group-by in Spark (decide/here.py);
  collected  the offset strategy's small range: its winners grouped by Spark, decided here;
  in tasks   the offset strategy's large range: decided in the tasks of the group-by (decide/task.py);
  grouped    the other strategies' (and what the offset strategy's routes above leave): the decision's
             columns worked out by Spark, collected here (a small range) or cached there.
The last three group by Spark (decide/grouped.py).

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

from compaction_assets.cleaning.decide.decision import Decision, ProbedDecision
from compaction_assets.cleaning.decide.grouped import (
    cached,
    collected,
    collected_offset_decision,
    decided_in_tasks,
    decision_columns,
    keyed_winners,
    range_winners,
)
from compaction_assets.cleaning.decide.here import decide_here, newer_keys, newer_winners
from compaction_assets.cleaning.decide.placement import DecideAt, Placement, place
from compaction_assets.cleaning.decide.probe import decide_by_probe
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.log.reader import dead_offsets
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig


def decide(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    vector: Callable[[], pa.Array | None] | None = None,
    tuning: CleanerTuning = DEFAULT_TUNING,
    placement: Placement | None = None,
) -> Decision:
    """Per key of the range (the planner's `span`) its winner and what happens to it; per segment what the
    cleaning leaves; by the route `placement` chose (`place`'s when not given).

    `vector()`, when given, returns the log's deletion vector as `dead_offsets` reads it (a cleaning
    reads it once for the decision and the write)."""
    placement = placement or place(spark, config, span, tuning)
    new_horizon = min(now + config.delete_retention_ms, INT64_MAX)
    # read when the probe or a decision made here needs it, and once (the cleaner passes its own, cached)
    vector = vector or functools.cache(functools.partial(dead_offsets, handle, manifest))
    at, touched = placement.decide, placement.only_touched_keys
    if at is DecideAt.PROBED:
        return _probed(spark, handle, manifest, config, span, now, new_horizon, vector, tuning, placement)
    if at is DecideAt.LOCAL:
        here = placement.here
        return decide_here(handle, manifest, span, now, new_horizon, vector, here.threads, here.buckets)
    found = range_winners(spark, handle, manifest, config, span, tuning, touched)
    if at is DecideAt.COLLECTED_WINNERS:
        return collected_offset_decision(found, span, now, new_horizon, touched)
    if at is DecideAt.TASKS:
        return decided_in_tasks(found, span, now, new_horizon, touched)
    decided = decision_columns(spark, handle, manifest, config, found, span, now, new_horizon, tuning)
    if at is DecideAt.COLLECTED:
        return collected(spark, decided, config, span, new_horizon, touched)
    return cached(decided, span, new_horizon, touched)


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
    placement: Placement,
) -> Iterator[Decision]:
    """`decide`, and what the decision holds in Spark dropped once the cleaning is done with it."""
    decision = decide(spark, handle, manifest, config, span, now, vector, tuning, placement)
    try:
        yield decision
    finally:
        decision.release()


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
    placement: Placement,
) -> ProbedDecision:
    """The probed decision (probe.py), its newer rows' winners found here as `placement.here` plans (their
    keys read apart, for the probe to start on), or grouped by Spark when it plans no thread; the prefix
    probed in `placement.probe_threads` threads."""
    newer, threads = placement.here, placement.probe_threads
    if newer.threads:
        grouped = functools.partial(newer_winners, handle, manifest, span.newer, vector, newer.threads, newer.buckets)
        key_reader = functools.partial(newer_keys, handle, manifest, span.newer, vector)
        return decide_by_probe(
            spark, handle, manifest, span, grouped, now, new_horizon, vector(), tuning, threads, key_reader
        )
    query = keyed_winners(spark, handle, manifest, config, span.newer, span.newer_rows, tuning)
    return decide_by_probe(spark, handle, manifest, span, query.toArrow, now, new_horizon, vector(), tuning, threads)
