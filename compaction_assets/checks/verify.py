"""The four asset checks: compare the log a cleaning committed with the checks' own model (`model.py`).

`verify_cleaning` reads the version the cleaning read (`before`) and the one it committed (`after`)
once, builds the model, and runs every check on that one pass. The Dagster checks, the conformance
runner (`--checks`) and the tests all call it. Each outcome names examples of what is wrong.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from compaction_assets.checks import specs
from compaction_assets.checks.findings import CheckOutcome, Findings, example, text
from compaction_assets.checks.model import (
    EXPIRED_TOMBSTONE,
    LOST_TO_REMEMBERED,
    SUPERSEDED,
    CleaningUnderCheck,
    LogView,
    Rec,
    RememberedDelete,
    first_dirty_offset,
    load,
)
from compaction_assets.errors import CorruptLogError
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig


def _range_records(c: CleaningUnderCheck) -> list[Rec]:
    """The after-log's records in the rewritten range."""
    return [r for r in c.after.records() if r.offset < c.expectation.range_end]


def latest_value_per_key(c: CleaningUnderCheck) -> CheckOutcome:
    """Every key of the rewritten range keeps exactly its winner (SPEC §6), and no other record."""
    e = c.expectation
    f = Findings()
    f.kind("records_not_the_winner", "record(s) kept that are not their key's winner")
    f.kind("winning_values_missing", "winning value(s) missing")
    f.kind("keys_with_several_records", "key(s) with several records in the cleaned range")
    if c.cleaned:
        seen: dict[bytes, int] = {}
        for r in _range_records(c):
            seen[r.key] = seen.get(r.key, 0) + 1
            gone = e.removed.get(r.offset)
            if gone is not None and gone[1] == SUPERSEDED:
                f.add("records_not_the_winner", example(r, winner_offset=e.winners[r.key].offset))
        for key, n in seen.items():
            if n > 1:
                f.add("keys_with_several_records", {"key": text(key), "records": n})
        present = {r.offset for r in _range_records(c)}
        for off, r in e.kept.items():
            if not r.tombstone and off not in present:
                f.add("winning_values_missing", example(r, value=text(r.value)))
    return f.outcome(
        specs.LATEST_VALUE_PER_KEY,
        "every key keeps exactly its winner" if c.cleaned else "no cleaning ran: nothing to verify",
        {
            "keys_checked": len(e.winners) if c.cleaned else 0,
            "cleaned": c.cleaned,
            "first_uncleanable_offset": e.first_uncleanable,
        },
    )


def tombstone_retention(c: CleaningUnderCheck) -> CheckOutcome:
    """Tombstones kept until their horizon and removed after it unless held; no deleted key back."""
    e = c.expectation
    f = Findings()
    f.kind("removed_before_horizon", "tombstone(s) removed before their horizon")
    f.kind(
        "removed_while_held",
        "expired tombstone(s) removed while a losing record of their key is outside the cleaned range",
    )
    f.kind("kept_after_horizon", "tombstone(s) kept after their horizon and not held")
    f.kind("wrong_horizon", "kept tombstone(s) with a wrong delete horizon")
    f.kind("deleted_keys_brought_back", "record(s) of deleted keys kept")
    f.kind("deletes_not_remembered", "removed tombstone(s) or remembered delete(s) missing from the remembered deletes")
    if c.cleaned:
        _find_tombstones_misplaced(f, c)
        _find_deletes_not_remembered(f, c)
    tombs = sum(1 for w in e.winners.values() if w.tombstone)
    return f.outcome(
        specs.TOMBSTONE_RETENTION,
        "tombstones kept until their horizon and removed after it"
        if c.cleaned
        else "no cleaning ran: nothing to verify",
        {
            "winning_tombstones": tombs if c.cleaned else 0,
            "held": len(e.held) if c.cleaned else 0,
            "remembered_deletes": len(c.remembered_after),
            "now": c.now,
            "cleaned": c.cleaned,
        },
    )


def _find_tombstones_misplaced(f: Findings, c: CleaningUnderCheck) -> None:
    """Tombstones removed before their horizon (or while held), kept after it, or kept with a wrong
    horizon, and records of deleted keys kept."""
    e = c.expectation
    after = {r.offset: r for r in _range_records(c)}
    deleted_keys = {
        k
        for k, w in c.expectation.winners.items()
        if w.tombstone or e.removed.get(w.offset, (None, ""))[1] == LOST_TO_REMEMBERED
    }
    for off, want in e.kept.items():
        if not want.tombstone:
            continue
        got = after.get(off)
        if got is None:
            f.add(
                "removed_while_held" if off in e.held else "removed_before_horizon",
                example(want, delete_horizon=want.delete_horizon),
            )
        elif got.delete_horizon != want.delete_horizon:
            f.add("wrong_horizon", example(got, delete_horizon=got.delete_horizon, expected=want.delete_horizon))
    for off, r in after.items():
        why = e.removed.get(off, (None, ""))[1]
        if why == EXPIRED_TOMBSTONE or (why == LOST_TO_REMEMBERED and r.tombstone):
            f.add("kept_after_horizon", example(r, delete_horizon=r.delete_horizon, reason=why))
        elif not r.tombstone and r.key in deleted_keys:
            f.add("deleted_keys_brought_back", example(r, value=text(r.value), reason=why or "kept"))


def _find_deletes_not_remembered(f: Findings, c: CleaningUnderCheck) -> None:
    """Tombstones the cleaning removed, and deletes remembered before it, missing from the remembered deletes
    it left (a remembered delete may be replaced by a newer one of its key)."""
    e = c.expectation
    remembered: dict[bytes, list[RememberedDelete]] = {}
    for m in c.remembered_after:
        remembered.setdefault(m.key, []).append(m)
    for m in e.newly_remembered:
        if not any(x.offset == m.offset and x.expiry == m.expiry for x in remembered.get(m.key, [])):
            f.add("deletes_not_remembered", {"key": text(m.key), "offset": m.offset, "until": m.expiry})
    for m in e.remembered_before:
        if not any(x.rank >= m.rank for x in remembered.get(m.key, [])):  # kept, or replaced by a newer delete
            f.add("deletes_not_remembered", {"key": text(m.key), "offset": m.offset, "until": m.expiry})


def offsets_and_order_preserved(c: CleaningUnderCheck) -> CheckOutcome:
    """Offsets and order kept, records only removed, nothing at or above the first uncleanable offset
    changed, the cleaned range laid out as SPEC §6 merges it, the checkpoint at that offset."""
    f = Findings()
    f.kind("segments_not_contiguous", "segment boundary(ies) leaving a gap or an overlap")
    f.kind("records_outside_segment", "record(s) outside their segment's offset range")
    f.kind("offsets_out_of_order", "offset(s) not strictly increasing")
    f.kind("records_not_in_input", "record(s) not in the log before the cleaning (new or altered)")
    f.kind("records_changed_above_first_uncleanable", "record(s) at or above the first uncleanable offset changed")
    f.kind("log_bounds_moved", "log bound(s) moved (log start, log end, checkpoint)")
    f.kind(
        "wrong_segment_layout", "segment boundary(ies) below the first uncleanable offset not as SPEC §6 merges them"
    )
    old = {r.offset: r for r in c.before.records()}
    new = {r.offset: r for r in c.after.records()}
    _find_segments_out_of_order(f, c.after)
    _find_records_not_kept(f, c, old, new)
    _find_bounds_and_layout_moved(f, c)
    return f.outcome(
        specs.OFFSETS_AND_ORDER_PRESERVED,
        "offsets and order preserved",
        {
            "first_uncleanable_offset": c.expectation.first_uncleanable,
            "records_before": len(old),
            "records_after": len(new),
            "cleaned": c.cleaned,
        },
    )


def _find_segments_out_of_order(f: Findings, after: LogView) -> None:
    """Segments that leave a gap or overlap, records outside their segment, offsets not increasing."""
    for a, b in itertools.pairwise(after.segments):
        if a.next_offset != b.base_offset:
            f.add(
                "segments_not_contiguous",
                {"segment": [a.base_offset, a.next_offset], "next": [b.base_offset, b.next_offset]},
            )
    last = None
    for s in after.segments:
        for r in s.records:
            if not s.base_offset <= r.offset < s.next_offset:
                f.add("records_outside_segment", example(r, segment=[s.base_offset, s.next_offset]))
            if last is not None and r.offset <= last:
                f.add("offsets_out_of_order", example(r, previous=last))
            last = r.offset


def _find_records_not_kept(f: Findings, c: CleaningUnderCheck, old: dict[int, Rec], new: dict[int, Rec]) -> None:
    """Records of `after` (by offset in `new`) that were not in `before` (`old`) as they are (appends while
    the cleaning ran aside), and records at or above the first uncleanable offset that changed."""
    e = c.expectation
    for s in c.after.segments:
        for r in s.records:
            if r.offset >= c.before.log_end_offset and s.base_offset >= e.range_end:
                continue  # appended while the cleaning ran
            was = old.get(r.offset)
            if was is None or not was.same_content(r):
                f.add("records_not_in_input", example(r, value=text(r.value)))
    for o in c.before.records():
        if o.offset >= e.range_end:
            kept = new.get(o.offset)
            if kept is None or not kept.same_content(o) or kept.delete_horizon != o.delete_horizon:
                f.add("records_changed_above_first_uncleanable", example(o, now=None if kept is None else "altered"))


def _find_bounds_and_layout_moved(f: Findings, c: CleaningUnderCheck) -> None:
    """Log start or end moved, and for a cleaning the checkpoint not at the first uncleanable offset or
    the cleaned range's segments not as SPEC §6 merges them."""
    e, before, after = c.expectation, c.before, c.after
    if after.log_start_offset != before.log_start_offset:
        f.add("log_bounds_moved", {"log_start_offset": [before.log_start_offset, after.log_start_offset]})
    if after.log_end_offset < before.log_end_offset:
        f.add("log_bounds_moved", {"log_end_offset": [before.log_end_offset, after.log_end_offset]})
    if not c.cleaned:
        return
    if after.checkpoint != e.first_uncleanable:
        f.add("log_bounds_moved", {"checkpoint": after.checkpoint, "expected": e.first_uncleanable})
    layout = [
        (s.base_offset, s.next_offset)
        for s in after.segments
        if s.next_offset <= e.range_end and s is not after.segments[-1]
    ]
    if e.range_segments and layout != e.layout:
        f.add(
            "wrong_segment_layout",
            {"segments": [list(x) for x in layout[:20]], "expected": [list(x) for x in e.layout[:20]]},
        )


def max_compaction_delay(c: CleaningUnderCheck) -> CheckOutcome:
    """No dirty record the cleaning could reach waits longer than max.compaction.lag.ms (SPEC §5), and
    the active segment was sealed once its deadline passed (SPEC §1)."""
    cfg, after, now = c.config, c.after, c.now
    f = Findings()
    f.kind("dirty_records_over_deadline", "dirty record(s) the cleaning could reach wait beyond max.compaction.lag.ms")
    f.kind("active_segment_past_deadline", "record(s) of the active segment past the roll deadline (not sealed)")
    delay = 0
    if cfg.compact:
        fd = first_dirty_offset(after)
        u = c.expectation.first_uncleanable
        deadline = now - cfg.max_compaction_lag_ms
        earliest = None
        for s in after.segments[:-1]:
            if s.next_offset <= fd:
                continue
            for r in s.records:
                if r.timestamp > 0:
                    earliest = r.timestamp if earliest is None else min(earliest, r.timestamp)
                if r.offset >= fd and r.offset < u and 0 < r.timestamp < deadline:
                    f.add("dirty_records_over_deadline", example(r, timestamp=r.timestamp, waited_ms=now - r.timestamp))
        if earliest is not None and deadline > earliest:
            delay = deadline - earliest
        active = after.segments[-1].records
        roll_ms = min(cfg.segment_ms, cfg.max_compaction_lag_ms)
        if active and min(r.timestamp for r in active) < now - roll_ms:
            for r in active:
                if r.timestamp < now - roll_ms:
                    f.add("active_segment_past_deadline", example(r, timestamp=r.timestamp))
    return f.outcome(
        specs.MAX_COMPACTION_DELAY,
        "within max.compaction.lag.ms" if cfg.compact else "not a compacted topic",
        {"max_compaction_delay_ms": delay, "max_compaction_lag_ms": cfg.max_compaction_lag_ms},
    )


CHECKS: dict[str, Callable[[CleaningUnderCheck], CheckOutcome]] = {
    specs.LATEST_VALUE_PER_KEY: latest_value_per_key,
    specs.TOMBSTONE_RETENTION: tombstone_retention,
    specs.OFFSETS_AND_ORDER_PRESERVED: offsets_and_order_preserved,
    specs.MAX_COMPACTION_DELAY: max_compaction_delay,
}


def verify_cleaning(
    handle: LogHandle,
    config: TopicConfig,
    before: Manifest,
    after: Manifest,
    now: int,
    cleaned: bool,
    names: tuple[str, ...] | None = None,
) -> list[CheckOutcome]:
    """Run the checks (all, or `names`) on one cleaning: both versions read once, shared by the checks."""
    return verify_loaded(load(handle, config, before, after, now, cleaned), names)


def verify_loaded(cleaning: CleaningUnderCheck, names: tuple[str, ...] | None = None) -> list[CheckOutcome]:
    """Run the checks (all, or `names`) on a cleaning read already."""
    return [CHECKS[spec.name](cleaning) for spec in specs.CHECK_SPECS if names is None or spec.name in names]


def _version(handle: LogHandle, version: int) -> Manifest:
    """One manifest version; version 0 of a log whose first change came later is its empty state."""
    try:
        return handle.manifest_version(version)
    except CorruptLogError:
        if version == 0:
            return Manifest.empty(handle.name)
        raise


def verify_versions(
    handle: LogHandle,
    config: TopicConfig,
    before_version: int,
    after_version: int,
    now: int,
    cleaned: bool,
    names: tuple[str, ...] | None = None,
) -> list[CheckOutcome]:
    """`verify_cleaning` on two manifest versions of the log (version 0 of a log that had no change
    before the cleaning is its empty state)."""
    return verify_loaded(load_versions(handle, config, before_version, after_version, now, cleaned), names)


def load_versions(
    handle: LogHandle, config: TopicConfig, before_version: int, after_version: int, now: int, cleaned: bool
) -> CleaningUnderCheck:
    """Two manifest versions of the log read for the checks (as `verify_versions` reads them)."""
    return load(handle, config, _version(handle, before_version), _version(handle, after_version), now, cleaned)
