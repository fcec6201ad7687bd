"""How to clean (SPEC §6): one cleaning of the segments below the first uncleanable offset, step by step.

  place   (placement.py)         where the work runs (this process, Spark's tasks), chosen once;
  decide  (decide.py, probe.py)  per key its winner, per segment what the cleaning keeps (decision.py);
  layout  (layout.py)            which segments are rewritten, marked or kept, and how they merge;
  write   (write.py)             one job rewrites runs of segments and adds to the deletion vector,
                                 where the placement says for its kept offsets (Python workers, or
                                 threads here);
  guard   (guard.py)             holds, tombstone index and remembered deletes (timestamp, header).
Full records are read only where a file is rewritten and never shuffled; nothing reaches the driver but
per-segment figures, the names of written files, the few held tombstones and, when it writes itself,
the kept offsets of the segments it writes (about 12 bytes a kept record). The thresholds between fast
paths and their general twins are one `CleanerTuning` (tuning.py).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compaction_assets.cleaning.decide.decision import CleaningStats
from compaction_assets.cleaning.decide.placement import place
from compaction_assets.cleaning.decide.route import decided
from compaction_assets.cleaning.guard import guard_outputs
from compaction_assets.cleaning.layout import plan_layout, segments_after
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.cleaning.write import apply
from compaction_assets.log.reader import dead_offsets
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import CleaningRange
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
