"""How to clean (SPEC §6): one cleaning of the segments below the first uncleanable offset, step by step.

  place   (decide/placement.py)  where the work runs (this process, Spark's tasks), chosen once;
  decide  (here, `decide`)       per key its winner, per segment what the cleaning keeps (decide/decision.py),
                                 by the route the placement chose (below);
  layout  (layout.py)            which segments are rewritten, marked or kept, and how they merge;
  write   (write.py)             one job rewrites runs of segments and adds to the deletion vector,
                                 where the placement says for its kept offsets (Python workers, or
                                 threads here);
  guard   (guard.py)             holds, tombstone index and remembered deletes (timestamp, header).
Full records are read only where a file is rewritten and never shuffled; nothing reaches the driver but
per-segment figures, the names of written files, the few held tombstones and, when it writes itself,
the kept offsets of the segments it writes (about 12 bytes a kept record). The thresholds between fast
paths and their general twins are one `CleanerTuning` (tuning.py).

The decision is a group-by over narrow rows (key, offset, rank, tombstone flag, horizon: only winners can
be kept), its routes:
  probed     the offset strategy's range whose newer rows are few, above a prefix that the last cleaning
             left with one record per key: the newer rows grouped (here, or by Spark) and the prefix
             probed for the records their keys supersede (decide/probe.py);
  here       the offset strategy's range under a local master, when it fits: Arrow in this process, no
             group-by in Spark (decide/arrow_decision.py);
  collected  the offset strategy's small range: its winners grouped by Spark, decided here;
  in tasks   the offset strategy's large range: decided in the tasks of the group-by (decide/arrow_decision.py);
  grouped    the other strategies' (and what the offset strategy's routes above leave): the decision's
             columns worked out by Spark, collected here (a small range) or cached there.
The last three group by Spark (decide/grouped.py). Under the strategies other than the offset's, in a large
range whose rest is small, only the touched keys are grouped (the newer rows and the older rows of their
keys), so a cleaning after 1% of new records shuffles about 2% of the rows, not all of them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from compaction_assets.cleaning.decide.arrow_decision import decide_here, newer_keys, newer_winners
from compaction_assets.cleaning.decide.decision import CleaningStats, Decision, ProbedDecision
from compaction_assets.cleaning.decide.grouped import (
    cached,
    collected,
    collected_offset_decision,
    decided_in_tasks,
    decision_columns,
    keyed_winners,
    range_winners,
)
from compaction_assets.cleaning.decide.placement import DecideAt, Placement, place
from compaction_assets.cleaning.decide.probe import decide_by_probe
from compaction_assets.cleaning.guard import guard_outputs
from compaction_assets.cleaning.layout import plan_layout, segments_after
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.cleaning.write import apply
from compaction_assets.log.reader import dead_offsets
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import CleaningRange
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Hold, Manifest, Segment
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class Route:
    """Which paths a cleaning took (the fast path or its general twin), for tests and diagnosis."""

    decision: str  # "cached" | "collected" | "task" | "local" | "probed"
    only_touched_keys: bool  # the group-by saw only the keys that newer rows touch
    write_threads: int | None  # the write ran in this many threads here, 0: in Python workers,
    # None: nothing to write
    reason: str = ""  # why the decision took its route (the cleaning's `Placement.reason`)


@dataclass
class CleanOutput:
    """What a cleaning wrote and what its commit replaces."""

    segments: tuple[Segment, ...]  # replaces the first `replaced` segments of the snapshot
    replaced: tuple[str, ...]
    stats: CleaningStats
    holds: tuple[Hold, ...] = ()
    remembered: dict[str, Any] | None = None
    tombstone_index: dict[str, Any] | None = None
    deleted: dict[str, Any] | None = None
    files_rewritten: int = 0
    route: Route | None = None


def clean(
    spark,
    handle: LogHandle,
    manifest: Manifest,
    config: TopicConfig,
    span: CleaningRange,
    now: int,
    progress: Callable[[str], None] | None = None,
    tuning: CleanerTuning = DEFAULT_TUNING,
) -> CleanOutput:
    """Clean `manifest` (a snapshot) in the planner's `span` at `now`; write new files; return what the
    commit replaces."""
    started = time.monotonic()

    def say(message: str) -> None:  # one line per step, naming the log (a fleet's lines interleave)
        if progress is not None:
            progress(f"{handle.name}: {message}")

    range_segs = [segment for _, segment in span.segments]
    if not range_segs:
        return _nothing_to_rewrite(manifest, started)
    say(
        f"deciding winners over {len(range_segs)} segment(s), offsets "
        f"[{range_segs[0].base_offset}, {span.first_uncleanable})"
    )
    # the deletion vector, read once when a step needs it on the driver (the probe, the write)
    vector = functools.cache(functools.partial(dead_offsets, handle, manifest))
    placement = place(spark, config, span, tuning)
    with decided(spark, handle, manifest, config, span, now, vector, tuning, placement) as decision:
        plan = plan_layout(decision, len(range_segs), config.segment_bytes, tuning)
        if plan.rewrite or plan.mark:
            say(
                f"rewriting {len(plan.rewrite)} segment(s) into {len(plan.runs)} file(s) and marking removed "
                f"records of {len(plan.mark)}, of {len(range_segs)} segment(s)"
            )
        applied = apply(spark, handle, manifest, decision, range_segs, plan, vector, tuning, placement)
        segments = segments_after(range_segs, decision, plan, {r: ref for r, (ref, _) in applied.written.items()})
        out = CleanOutput(
            tuple(segments),
            tuple(s.id for s in range_segs),
            applied.stats,
            files_rewritten=len(applied.written),
            deleted=applied.deleted,
            route=Route(
                type(decision).__name__.removesuffix("Decision").lower(),
                decision.only_touched_keys,
                applied.threads,
                placement.reason,
            ),
        )
        if strategy_of(config).needs_guard:
            say("updating the tombstone index and remembered deletes")
            guard = guard_outputs(spark, handle, manifest, config, decision, now)
            out.holds, out.tombstone_index, out.remembered = guard.holds, guard.tombstone_index, guard.remembered
    out.stats.clean_time_secs = time.monotonic() - started
    return out


def _nothing_to_rewrite(manifest: Manifest, started: float) -> CleanOutput:
    """The output of a cleaning whose range has no segment: the guard's state carries over unchanged."""
    return CleanOutput(
        (),
        (),
        CleaningStats(clean_time_secs=time.monotonic() - started),
        holds=manifest.holds,
        remembered=manifest.remembered,
        tombstone_index=manifest.tombstone_index,
        deleted=manifest.deleted,
    )


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
