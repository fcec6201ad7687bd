"""The four asset checks: compare the log a cleaning committed with the checks' own model (`model.py`).

`verify_cleaning` reads the version the cleaning read (`before`) and the one it committed (`after`)
once, builds the model, and runs every check on that one pass. The Dagster checks, the conformance
runner (`--checks`) and the tests all call it. Each outcome names examples of what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from compaction_assets.checks import specs
from compaction_assets.checks.model import (
    EXPIRED_TOMBSTONE,
    LOST_TO_REMEMBERED,
    SUPERSEDED,
    CleaningUnderCheck,
    Rec,
    first_dirty_offset,
    load,
)
from compaction_assets.errors import CorruptLogError
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

EXAMPLES = 5


@dataclass
class CheckOutcome:
    """One check's verdict, its one-line description and its metadata (counts and examples)."""

    name: str
    passed: bool
    description: str
    metadata: dict = field(default_factory=dict)


def _text(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", "replace")


def _example(r: Rec, **extra) -> dict:
    return {"key": _text(r.key), "offset": r.offset, **extra}


class _Findings:
    """Counted problems, each with up to EXAMPLES examples, turned into an outcome."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.examples: dict[str, list] = {}
        self.order: list[tuple[str, str]] = []

    def kind(self, name: str, words: str) -> None:
        self.counts[name] = 0
        self.order.append((name, words))

    def add(self, name: str, example) -> None:
        self.counts[name] += 1
        if len(self.examples.setdefault(name, [])) < EXAMPLES:
            self.examples[name].append(example)

    def outcome(self, check: str, ok_text: str, meta: dict) -> CheckOutcome:
        bad = [f"{self.counts[n]} {words}" for n, words in self.order if self.counts[n]]
        meta = {**meta, **self.counts, **{f"examples_{n}": ex for n, ex in self.examples.items()}}
        return CheckOutcome(check, not bad, ok_text if not bad else "; ".join(bad), meta)


def _range_records(c: CleaningUnderCheck) -> list[Rec]:
    """The after-log's records in the rewritten range."""
    return [r for r in c.after.records() if r.offset < c.expectation.range_end]


def latest_value_per_key(c: CleaningUnderCheck) -> CheckOutcome:
    """Every key of the rewritten range keeps exactly its winner (SPEC §6), and no other record."""
    e = c.expectation
    f = _Findings()
    f.kind("records_not_the_winner", "record(s) kept that are not their key's winner")
    f.kind("winning_values_missing", "winning value(s) missing")
    f.kind("keys_with_several_records", "key(s) with several records in the cleaned range")
    if c.cleaned:
        seen: dict[bytes, int] = {}
        for r in _range_records(c):
            seen[r.key] = seen.get(r.key, 0) + 1
            gone = e.removed.get(r.offset)
            if gone is not None and gone[1] == SUPERSEDED:
                f.add("records_not_the_winner", _example(r, winner_offset=e.winners[r.key].offset))
        for key, n in seen.items():
            if n > 1:
                f.add("keys_with_several_records", {"key": _text(key), "records": n})
        present = {r.offset for r in _range_records(c)}
        for off, r in e.kept.items():
            if not r.tombstone and off not in present:
                f.add("winning_values_missing", _example(r, value=_text(r.value)))
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
    f = _Findings()
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
                    _example(want, delete_horizon=want.delete_horizon),
                )
            elif got.delete_horizon != want.delete_horizon:
                f.add("wrong_horizon", _example(got, delete_horizon=got.delete_horizon, expected=want.delete_horizon))
        for off, r in after.items():
            why = e.removed.get(off, (None, ""))[1]
            if why == EXPIRED_TOMBSTONE or (why == LOST_TO_REMEMBERED and r.tombstone):
                f.add("kept_after_horizon", _example(r, delete_horizon=r.delete_horizon, reason=why))
            elif not r.tombstone and r.key in deleted_keys:
                f.add("deleted_keys_brought_back", _example(r, value=_text(r.value), reason=why or "kept"))
        remembered = {}
        for m in c.remembered_after:
            remembered.setdefault(m.key, []).append(m)
        for m in e.newly_remembered:
            if not any(x.offset == m.offset and x.expiry == m.expiry for x in remembered.get(m.key, [])):
                f.add("deletes_not_remembered", {"key": _text(m.key), "offset": m.offset, "until": m.expiry})
        for m in e.remembered_before:
            if not any(x.rank >= m.rank for x in remembered.get(m.key, [])):  # kept, or replaced by a newer delete
                f.add("deletes_not_remembered", {"key": _text(m.key), "offset": m.offset, "until": m.expiry})
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


def offsets_and_order_preserved(c: CleaningUnderCheck) -> CheckOutcome:
    """Offsets and order kept, records only removed, nothing at or above the first uncleanable offset
    changed, the cleaned range laid out as SPEC §6 merges it, the checkpoint at that offset."""
    e, before, after = c.expectation, c.before, c.after
    f = _Findings()
    f.kind("segments_not_contiguous", "segment boundary(ies) leaving a gap or an overlap")
    f.kind("records_outside_segment", "record(s) outside their segment's offset range")
    f.kind("offsets_out_of_order", "offset(s) not strictly increasing")
    f.kind("records_not_in_input", "record(s) not in the log before the cleaning (new or altered)")
    f.kind("records_changed_above_first_uncleanable", "record(s) at or above the first uncleanable offset changed")
    f.kind("log_bounds_moved", "log bound(s) moved (log start, log end, checkpoint)")
    f.kind(
        "wrong_segment_layout", "segment boundary(ies) below the first uncleanable offset not as SPEC §6 merges them"
    )
    for a, b in zip(after.segments, after.segments[1:]):
        if a.next_offset != b.base_offset:
            f.add(
                "segments_not_contiguous",
                {"segment": [a.base_offset, a.next_offset], "next": [b.base_offset, b.next_offset]},
            )
    last = None
    for s in after.segments:
        for r in s.records:
            if not s.base_offset <= r.offset < s.next_offset:
                f.add("records_outside_segment", _example(r, segment=[s.base_offset, s.next_offset]))
            if last is not None and r.offset <= last:
                f.add("offsets_out_of_order", _example(r, previous=last))
            last = r.offset
    old = {r.offset: r for r in before.records()}
    for s in after.segments:
        for r in s.records:
            if r.offset >= before.log_end_offset and s.base_offset >= e.range_end:
                continue  # appended while the cleaning ran
            o = old.get(r.offset)
            if o is None or not o.same_content(r):
                f.add("records_not_in_input", _example(r, value=_text(r.value)))
    new = {r.offset: r for r in after.records()}
    for o in before.records():
        if o.offset >= e.range_end:
            r = new.get(o.offset)
            if r is None or not r.same_content(o) or r.delete_horizon != o.delete_horizon:
                f.add("records_changed_above_first_uncleanable", _example(o, now=None if r is None else "altered"))
    if after.log_start_offset != before.log_start_offset:
        f.add("log_bounds_moved", {"log_start_offset": [before.log_start_offset, after.log_start_offset]})
    if after.log_end_offset < before.log_end_offset:
        f.add("log_bounds_moved", {"log_end_offset": [before.log_end_offset, after.log_end_offset]})
    if c.cleaned:
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
    return f.outcome(
        specs.OFFSETS_AND_ORDER_PRESERVED,
        "offsets and order preserved",
        {
            "first_uncleanable_offset": e.first_uncleanable,
            "records_before": len(old),
            "records_after": len(new),
            "cleaned": c.cleaned,
        },
    )


def max_compaction_delay(c: CleaningUnderCheck) -> CheckOutcome:
    """No dirty record the cleaning could reach waits longer than max.compaction.lag.ms (SPEC §5), and
    the active segment was sealed once its deadline passed (SPEC §1)."""
    cfg, after, now = c.config, c.after, c.now
    f = _Findings()
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
                    f.add(
                        "dirty_records_over_deadline", _example(r, timestamp=r.timestamp, waited_ms=now - r.timestamp)
                    )
        if earliest is not None and deadline > earliest:
            delay = deadline - earliest
        active = after.segments[-1].records
        roll_ms = min(cfg.segment_ms, cfg.max_compaction_lag_ms)
        if active and min(r.timestamp for r in active) < now - roll_ms:
            for r in active:
                if r.timestamp < now - roll_ms:
                    f.add("active_segment_past_deadline", _example(r, timestamp=r.timestamp))
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
