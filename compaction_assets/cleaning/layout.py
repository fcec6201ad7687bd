"""The layout a cleaning leaves (SPEC §6): which segments are rewritten, marked or kept, and how they merge.

Known before anything is written: a segment with at least `rewrite_dead_fraction` of its rows dead is
rewritten (`first_mark_dead_fraction` while the deletion vector lists none of its rows), consecutive
rewritten members of one merge group into one file (a run); a segment that loses fewer records keeps its
files and its removed offsets go to the deletion vector (marked); a segment that only needs tombstone
horizons gets them as a file-level stamp.
"""

from __future__ import annotations

from dataclasses import dataclass

from compaction_assets.cleaning.decide.decision import Decision, SegmentFigures
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.store.manifest import FileRef, Segment, combine, new_id


@dataclass(frozen=True)
class RewritePlan:
    """What happens to each segment of a cleaning's range (indices into the range)."""

    rewrite: list[int]  # segments rewritten (enough of them dead)
    mark: list[int]  # segments kept, their removed offsets going to the deletion vector
    groups: list[list[int]]  # the merge groups of the range
    runs: list[list[int]]  # the rewritten segments cut into runs, a new file each


def rewrite_plan(decision: Decision, tuning: CleanerTuning = DEFAULT_TUNING) -> tuple[list[int], list[int]]:
    """Segments to rewrite (enough of them dead) and segments that only get deletion-vector entries."""
    rewrite, mark = [], []
    for i, p in sorted(decision.figures.items()):
        if p.kept == p.physical or p.kept == 0 or p.unchanged:
            continue  # untouched (a probed segment that loses nothing keeps its vector entries too), or
            # left with no file at all
        if (p.physical - p.kept) >= rewrite_line(p, tuning) * p.physical:
            rewrite.append(i)
        else:
            mark.append(i)
    return rewrite, mark


def rewrite_line(figures: SegmentFigures, tuning: CleanerTuning) -> float:
    """The dead share at which a segment is rewritten: lower for one the deletion vector does not list yet
    (marking it would only postpone its rewrite to one of the next cleanings)."""
    if figures.read < figures.physical:  # listed already: its marking is paid for
        return tuning.rewrite_dead_fraction
    return min(tuning.first_mark_dead_fraction, tuning.rewrite_dead_fraction)


def chosen_plan(decision: Decision, tuning: CleanerTuning) -> tuple[list[int], list[int]]:
    """`rewrite_plan`, or the plan the tuning hands in its place (a test's wrong one)."""
    return (tuning.rewrite_plan or rewrite_plan)(decision, tuning)


def plan_layout(decision: Decision, segments: int, segment_bytes: int, tuning: CleanerTuning) -> RewritePlan:
    """The plan of a range of `segments` segments: rewritten, marked, merged (rewritten neighbours share a file)."""
    rewrite, mark = chosen_plan(decision, tuning)
    figures = [decision.figures.get(i) for i in range(segments)]
    groups = merge_groups([p.kept_bytes if p else 0 for p in figures], segment_bytes)
    empty = {i for i, p in enumerate(figures) if not (p and p.kept)}
    return RewritePlan(rewrite, mark, groups, rewrite_runs(groups, rewrite, empty))


def merge_groups(sizes: list[int], segment_bytes: int) -> list[list[int]]:
    """Greedy merge in order: a segment joins the group before it while the total stays <= segment.bytes;
    the groups as lists of indices into `sizes`."""
    groups: list[list[int]] = []
    total = 0
    for i, size in enumerate(sizes):
        if groups and total + size <= segment_bytes:
            groups[-1].append(i)
            total += size
        else:
            groups.append([i])
            total = size
    return groups


def merge_layout(segments: list[Segment], segment_bytes: int) -> list[Segment]:
    """The segments merged as `merge_groups` groups them (SPEC §6)."""
    return merged(segments, merge_groups([s.size for s in segments], segment_bytes))


def merged(segments: list[Segment], groups: list[list[int]]) -> list[Segment]:
    """One segment per group: a group of one as it is, a larger one combined."""
    return [segments[g[0]] if len(g) == 1 else combine([segments[i] for i in g]) for g in groups]


def rewrite_runs(groups: list[list[int]], rewrite: list[int], empty: set[int]) -> list[list[int]]:
    """The rewritten segments cut into runs that become one file each: consecutive members of one merge
    group (segments left empty between them do not cut a run, having nothing to write)."""
    chosen = set(rewrite)
    runs: list[list[int]] = []
    for group in groups:
        current: list[int] = []
        for i in group:
            if i in chosen:
                current.append(i)
            elif i not in empty and current:
                runs.append(current)
                current = []
        if current:
            runs.append(current)
    return runs


def segments_after(
    range_segs: list[Segment], decision: Decision, plan: RewritePlan, written: dict[int, FileRef]
) -> list[Segment]:
    """The range's segments as the cleaning leaves them, merged: `written` is each run's new file."""
    run_of = {i: r for r, run in enumerate(plan.runs) for i in run}
    after = []
    for i, seg in enumerate(range_segs):
        p = decision.figures.get(i)
        if p is None or p.kept == 0:  # no visible record left
            after.append(Segment(new_id(), seg.base_offset, seg.next_offset))
            continue
        files: tuple[FileRef, ...]
        if i in run_of:  # the run's file, held by its first member (a run is inside one merge group)
            files = (written[run_of[i]],) if plan.runs[run_of[i]][0] == i else ()
        elif p.stamped:
            files = tuple(
                FileRef(f.name, f.records, f.stamp if f.stamp is not None else decision.new_horizon) for f in seg.files
            )
        else:
            files = seg.files
        after.append(
            Segment(
                id=new_id(),
                base_offset=seg.base_offset,
                next_offset=seg.next_offset,
                files=files,
                records=int(p.kept),
                size=int(p.kept_bytes),
                min_ts=p.min_ts,
                max_ts=p.max_ts,
                first_ts=p.first_ts,
                min_pos_ts=p.min_pos_ts,
                tombstones=int(p.tombstones),
                horizons=tuple(sorted(decision.horizons.get(i, []))),
                dead=0 if i in run_of else int(p.physical - p.kept),
            )
        )
    return merged(after, plan.groups)


def foreseen_segments(range_segs: list[Segment], decision: Decision, segment_bytes: int) -> list[Segment]:
    """The range's segments as the cleaning `decision` describes would leave them, merged, from its figures
    alone (a dry run's: nothing is written, so they name no file)."""
    after = []
    for i, seg in enumerate(range_segs):
        p = decision.figures.get(i)
        after.append(
            Segment(
                new_id(),
                seg.base_offset,
                seg.next_offset,
                records=p.kept if p else 0,
                size=p.kept_bytes if p else 0,
                max_ts=p.max_ts if p else None,
            )
        )
    return merge_layout(after, segment_bytes)
