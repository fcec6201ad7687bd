"""The planner's arithmetic (SPEC §1 deadline roll, §3 ranges, §4 dirty ratio, §5 eligibility), from
manifests alone: logs are built with log_ops (append, roll, set_checkpoint, set_log_start) and
planner.evaluate is called at chosen times. No record is read and no Spark is needed here, except in
the one test that obtains real tombstone horizons from a cleaning.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.planning import planner
from compaction_assets.segments.records import record_size
from compaction_assets.store.manifest import Hold
from compaction_assets.topics.config import INT64_MAX, build_config

REC = 30  # logical size of every record made by `recs`: 16 + 4 (key) + 10 (value)


def recs(n, ts, *, start_key=0, offsets=None, value=b"v" * 10):
    """n records with keys k000.., timestamps `ts` (an int for all, or a list)."""
    tss = ts if isinstance(ts, list) else [ts] * n
    out = []
    for i in range(n):
        r = {"key": f"k{(start_key + i) % 1000:03d}", "value": value, "timestamp": tss[i]}
        if offsets is not None:
            r["offset"] = offsets[i]
        out.append(r)
    return out


def cfg(**kw):
    return build_config({k.replace("_", "."): v for k, v in kw.items()})


def build(store, name, config, *segments, roll_last=True):
    """A log whose sealed segments hold the given record lists; the active segment is empty
    (or holds the last list when roll_last is False)."""
    log = store.log(name)
    for i, batch in enumerate(segments):
        writer.append(log, config, batch)
        if roll_last or i < len(segments) - 1:
            writer.roll(log)
    return log


def ev(log, config, now):
    return planner.evaluate(log.manifest(), config, now)


def test_record_size_of_helper():
    assert record_size(b"k000", b"v" * 10, []) == REC


# --- dirty ratio --------------------------------------------------------------------------------------


def test_all_dirty_ratio_one(store):
    c = cfg()
    log = build(store, "a-0", c, recs(4, 100), recs(6, 200))
    e = ev(log, c, 1000)
    assert (e.first_dirty_offset, e.first_uncleanable_offset) == (0, 10)
    assert (e.clean_bytes, e.cleanable_bytes) == (0, 10 * REC)
    assert e.dirty_ratio == 1.0
    assert e.eligible and e.reason == "dirty_ratio"
    assert e.log_start_offset == 0 and e.log_end_offset == 10


def test_checkpoint_on_segment_boundary(store):
    c = cfg()
    log = build(store, "a-0", c, recs(4, 100), recs(6, 200), recs(5, 300))
    writer.set_checkpoint(log, 4)
    e = ev(log, c, 1000)
    assert e.first_dirty_offset == 4 and e.first_uncleanable_offset == 15
    assert e.clean_bytes == 4 * REC
    assert e.cleanable_bytes == 11 * REC
    assert e.dirty_ratio == pytest.approx(11 / 15)


def test_segment_straddling_first_dirty_counts_on_both_sides(store):
    c = cfg()
    # segments [0,4) 4 recs, [4,10) 6 recs, [10,15) 5 recs; checkpoint inside the middle one
    log = build(store, "a-0", c, recs(4, 100), recs(6, 200), recs(5, 300))
    writer.set_checkpoint(log, 7)
    e = ev(log, c, 1000)
    assert e.first_dirty_offset == 7
    assert e.first_uncleanable_offset == 15
    assert e.clean_bytes == (4 + 6) * REC  # both segments with base < 7
    assert e.cleanable_bytes == (6 + 5) * REC  # from the one containing 7, whole
    assert e.dirty_ratio == pytest.approx(11 / 21)
    assert e.checkpoint_reset is False and e.stored_checkpoint == 7


def test_checkpoint_at_leo_nothing_cleanable(store):
    c = cfg(min_cleanable_dirty_ratio=0)
    log = build(store, "a-0", c, recs(4, 100), recs(6, 200))
    writer.set_checkpoint(log, 10)
    e = ev(log, c, 1000)
    assert e.first_dirty_offset == 10 and e.checkpoint_reset is False
    assert e.first_uncleanable_offset == 10
    assert e.cleanable_bytes == 0 and e.clean_bytes == 10 * REC
    assert e.dirty_ratio == 0.0
    assert not e.eligible  # 0 > 0 is false


def test_active_segment_never_cleanable(store):
    c = cfg()
    log = build(store, "a-0", c, recs(4, 100), recs(6, 200), roll_last=False)
    e = ev(log, c, 1000)
    assert e.first_uncleanable_offset == 4
    assert e.cleanable_bytes == 4 * REC and e.clean_bytes == 0
    # only an active segment: nothing cleanable, total 0
    log2 = build(store, "b-0", c, recs(3, 100), roll_last=False)
    e2 = ev(log2, c, 1000)
    assert (e2.first_uncleanable_offset, e2.cleanable_bytes, e2.dirty_ratio, e2.eligible) == (0, 0, 0.0, False)


def test_ratio_threshold_is_strict(store):
    log = build(store, "a-0", cfg(), recs(2, 100), recs(2, 100))
    writer.set_checkpoint(log, 2)
    # clean 2 records, cleanable 2 records: ratio exactly 0.5
    at = cfg(min_cleanable_dirty_ratio=0.5)
    e = ev(log, at, 1000)
    assert e.dirty_ratio == 0.5
    assert not e.eligible and e.reason is None
    below = cfg(min_cleanable_dirty_ratio=0.49)
    e = ev(log, below, 1000)
    assert e.eligible and e.reason == "dirty_ratio"
    # ratio 1.0 with threshold 1 is not eligible either
    writer.set_checkpoint(log, 0)
    e = ev(log, cfg(min_cleanable_dirty_ratio=1), 1000)
    assert e.dirty_ratio == 1.0 and not e.eligible
    e = ev(log, cfg(min_cleanable_dirty_ratio=0), 1000)
    assert e.eligible and e.reason == "dirty_ratio"


def test_ratio_threshold_with_fractional_sizes(store):
    # clean 3 records, cleanable 1: ratio 0.25
    log = build(store, "a-0", cfg(), recs(3, 100), recs(1, 100))
    writer.set_checkpoint(log, 3)
    assert ev(log, cfg(), 1000).dirty_ratio == 0.25
    assert not ev(log, cfg(min_cleanable_dirty_ratio=0.25), 1000).eligible
    assert ev(log, cfg(min_cleanable_dirty_ratio=0.2499), 1000).eligible


def test_sizes_are_logical_bytes_with_headers(store):
    c = cfg()
    log = store.log("h-0")
    writer.append(
        log,
        c,
        [
            {"key": b"kk", "value": None, "timestamp": 5, "headers": [("näme", b"123"), ("x", None)]},
            {"key": b"k", "value": b"abc", "timestamp": 6},
        ],
    )
    writer.roll(log)
    expected = (16 + 2 + 0 + len("näme".encode()) + 3 + 1) + (16 + 1 + 3)
    e = ev(log, c, 10)
    assert e.cleanable_bytes == expected
    assert log.manifest().segments[0].size == expected


# --- zero-total logs, non-compacted logs ----------------------------------------------------------------


def test_empty_log_reports_ratio_zero(store):
    c = cfg(min_cleanable_dirty_ratio=0)
    log = store.log("empty-0")
    e = planner.evaluate(log.manifest(), c, 10**12)
    assert e.clean_bytes == e.cleanable_bytes == 0
    assert e.dirty_ratio == 0.0 and not e.eligible and e.reason is None
    assert e.first_dirty_offset == 0 and e.first_uncleanable_offset == 0
    assert e.max_compaction_delay_ms == 0


def test_log_with_only_empty_segments_is_not_a_candidate(store):
    c = cfg(min_cleanable_dirty_ratio=0, max_compaction_lag_ms=1)
    log = build(store, "e-0", c, recs(3, 100, offsets=[10, 11, 12]), recs(2, 200))
    writer.set_log_start(log, 15)  # every record is below the log start
    m = log.manifest()
    assert m.total_size == 0
    e = planner.evaluate(m, c, 10**9)
    assert e.dirty_ratio == 0.0 and not e.eligible and e.reason is None


def test_log_without_compact_never_eligible(store):
    c = cfg(cleanup_policy="delete", min_cleanable_dirty_ratio=0, max_compaction_lag_ms=1)
    log = build(store, "d-0", c, recs(5, 100), recs(5, 200))
    e = ev(log, c, 10**9)
    assert e.compact is False
    assert not e.eligible and e.reason is None
    assert e.reason_for(force=True) is None and e.reason_for(force=False) is None
    # the same log with compact is eligible
    c2 = cfg(cleanup_policy="compact,delete", min_cleanable_dirty_ratio=0)
    e2 = ev(log, c2, 10**9)
    assert e2.eligible and e2.reason_for(force=True) == "dirty_ratio"


def test_force_reason(store):
    c = cfg(min_cleanable_dirty_ratio=1)
    log = build(store, "f-0", c, recs(2, 100))
    e = ev(log, c, 1000)
    assert not e.eligible
    assert e.reason_for(force=True) == "forced"
    assert e.reason_for(force=False) is None


# --- first uncleanable offset with min.compaction.lag.ms -------------------------------------------------


def test_min_lag_young_segment_blocks(store):
    c = cfg(min_compaction_lag_ms=600)
    # S0 [0,3) max ts 100, S1 [3,6) max ts 500, S2 [6,9) max ts 200
    log = build(store, "m-0", c, recs(3, [50, 100, 80]), recs(3, [300, 500, 400]), recs(3, 200))
    e = ev(log, c, 1000)  # now - lag = 400: S1 (500 > 400) is too young
    assert e.first_uncleanable_offset == 3
    assert e.cleanable_bytes == 3 * REC
    assert e.dirty_ratio == 1.0
    # the scan stops at the first too-young segment: S2 (old) does not become cleanable
    assert e.first_uncleanable_offset != 9


def test_min_lag_is_strict(store):
    c = cfg(min_compaction_lag_ms=600)
    log = build(store, "m-0", c, recs(3, 100), recs(3, 400), recs(3, 200))
    # S1 max ts 400 == now - lag: not too young (strict >)
    assert ev(log, c, 1000).first_uncleanable_offset == 9
    # one ms earlier it is too young
    assert ev(log, c, 999).first_uncleanable_offset == 3


def test_min_lag_zero_means_no_blocking(store):
    c = cfg(min_compaction_lag_ms=0)
    log = build(store, "m-0", c, recs(3, 10**12), recs(3, 10**12))
    assert ev(log, c, 0).first_uncleanable_offset == 6


def test_min_lag_first_segment_too_young(store):
    c = cfg(min_compaction_lag_ms=100)
    log = build(store, "m-0", c, recs(3, 950), recs(3, 10))
    e = ev(log, c, 1000)
    assert e.first_uncleanable_offset == 0
    assert e.cleanable_bytes == 0 and e.dirty_ratio == 0.0 and not e.eligible


def test_min_lag_scan_starts_at_first_dirty(store):
    c = cfg(min_compaction_lag_ms=100)
    # S0 is too young but lies wholly in the clean section: it does not block
    log = build(store, "m-0", c, recs(3, 990), recs(3, 10), recs(3, 20))
    writer.set_checkpoint(log, 3)
    e = ev(log, c, 1000)
    assert e.first_dirty_offset == 3
    assert e.first_uncleanable_offset == 9
    assert e.cleanable_bytes == 6 * REC and e.clean_bytes == 3 * REC


def test_min_lag_checkpoint_inside_young_segment(store):
    c = cfg(min_compaction_lag_ms=100, min_cleanable_dirty_ratio=0)
    log = build(store, "m-0", c, recs(3, 10), recs(4, 990), recs(3, 20))
    writer.set_checkpoint(log, 5)  # inside the too-young segment [3,7)
    e = ev(log, c, 1000)
    assert e.first_dirty_offset == 5
    assert e.first_uncleanable_offset == 5  # U = first_dirty: nothing cleanable
    assert e.cleanable_bytes == 0
    assert not e.eligible


def test_min_lag_checkpoint_inside_active_segment(store):
    c = cfg(min_cleanable_dirty_ratio=0)
    log = build(store, "m-0", c, recs(3, 10), recs(4, 20), roll_last=False)
    writer.set_checkpoint(log, 5)  # inside the active segment [3,7)
    e = ev(log, c, 100)
    assert e.first_dirty_offset == 5 and e.first_uncleanable_offset == 5
    assert e.cleanable_bytes == 0 and not e.eligible


def test_min_lag_empty_segment_never_blocks(store):
    c = cfg(min_compaction_lag_ms=100, min_cleanable_dirty_ratio=0)
    log = store.log("m-0")
    # S0 holds offsets 10..12 with a gap up to 20 (sealed by the segment.bytes rule at offset 20),
    # then the log start moves to 15: S0 [10,20) keeps its range but no visible record.
    small = cfg(segment_bytes=3 * REC)
    writer.append(log, small, recs(4, [995, 996, 997, 10], offsets=[10, 11, 12, 20]))
    writer.append(log, small, recs(2, 20, start_key=5))
    writer.roll(log)
    writer.set_log_start(log, 15)
    m = log.manifest()
    assert [(s.base_offset, s.next_offset, s.records) for s in m.segments] == [(10, 20, 0), (20, 23, 3), (23, 23, 0)]
    assert m.log_start_offset == 15
    e = planner.evaluate(m, c, 1000)
    # the empty segment's remembered max_ts is gone with its records; it never blocks
    assert e.first_dirty_offset == 15
    assert e.first_uncleanable_offset == 23
    assert e.cleanable_bytes == 3 * REC


def test_min_lag_segment_emptied_by_restat_keeps_no_stale_timestamps(store):
    # a straddling segment's stats cover only records at or above the log start
    c = cfg(min_compaction_lag_ms=100)
    log = build(store, "m-0", c, recs(4, [995, 996, 10, 11]), recs(2, 12))
    writer.set_log_start(log, 2)
    s0 = log.manifest().segments[0]
    assert (s0.records, s0.max_ts, s0.size) == (2, 11, 2 * REC)
    assert ev(log, c, 1000).first_uncleanable_offset == 6


def test_crafted_empty_sealed_segment_does_not_block(store):
    c = cfg(min_compaction_lag_ms=100)
    log = build(store, "m-0", c, recs(3, 10), recs(3, 20), recs(3, 30))
    m = log.manifest()
    segs = list(m.segments)
    # an emptied segment (as a cleaning leaves it) whose stale max_ts would be young
    segs[1] = replace(segs[1], files=(), records=0, size=0, min_ts=None, max_ts=None, first_ts=None, min_pos_ts=None)
    m = m.with_(segments=tuple(segs))
    e = planner.evaluate(m, c, 1000)
    assert e.first_uncleanable_offset == 9
    assert e.cleanable_bytes == 6 * REC


# --- checkpoint resets ---------------------------------------------------------------------------------


def test_checkpoint_above_leo_reset_to_log_start(store):
    c = cfg()
    log = build(store, "r-0", c, recs(3, 10), recs(3, 20))
    writer.set_checkpoint(log, 7)
    e = ev(log, c, 100)
    assert e.checkpoint_reset and e.stored_checkpoint == 7
    assert e.first_dirty_offset == 0 and e.first_uncleanable_offset == 6
    assert e.dirty_ratio == 1.0


def test_checkpoint_below_log_start_reset(store):
    c = cfg()
    log = build(store, "r-0", c, recs(3, 10), recs(3, 20), recs(3, 30))
    writer.set_log_start(log, 3)
    writer.set_checkpoint(log, 1)
    m = log.manifest()
    assert m.checkpoint == 1 and m.log_start_offset == 3  # stays stored as it is
    e = planner.evaluate(m, c, 100)
    assert e.checkpoint_reset and e.first_dirty_offset == 3
    assert e.clean_bytes == 0 and e.cleanable_bytes == 6 * REC


def test_checkpoint_left_below_log_start_by_log_start_move(store):
    c = cfg()
    log = build(store, "r-0", c, recs(3, 10), recs(3, 20), recs(3, 30))
    writer.set_checkpoint(log, 4)
    writer.set_log_start(log, 6)
    m = log.manifest()
    assert m.checkpoint == 4  # left as it is until an evaluation that may clean
    e = planner.evaluate(m, c, 100)
    assert e.first_dirty_offset == 6 and e.checkpoint_reset
    assert e.clean_bytes == 0 and e.cleanable_bytes == 3 * REC


def test_checkpoint_at_log_start_and_explicit_first_offset(store):
    c = cfg()
    log = store.log("r-0")
    writer.append(log, c, recs(3, 10, offsets=[100, 105, 107]))
    writer.roll(log)
    m = log.manifest()
    assert (m.log_start_offset, m.checkpoint, m.log_end_offset) == (100, 100, 108)
    e = planner.evaluate(m, c, 100)
    assert not e.checkpoint_reset and e.first_dirty_offset == 100
    assert e.first_uncleanable_offset == 108


def test_prepare_rewrites_checkpoint_dry_run_does_not(store):
    c = cfg(min_cleanable_dirty_ratio=1)  # never eligible: no Spark needed
    log = build(store, "r-0", c, recs(3, 10), recs(3, 20))
    writer.set_checkpoint(log, 99)
    version = log.manifest().version
    result = engine.dry_run(log, c, 100)
    assert result.evaluation.checkpoint_reset is True
    assert result.evaluation.first_dirty_offset == 0
    assert log.manifest().version == version and log.manifest().checkpoint == 99
    m, e = engine.prepare(log, c, 100)
    assert m.checkpoint == 0 and log.manifest().checkpoint == 0
    assert log.manifest().version == version + 1
    assert not e.checkpoint_reset
    # nothing to change: prepare commits nothing
    engine.prepare(log, c, 100)
    assert log.manifest().version == version + 1


# --- max compaction delay -------------------------------------------------------------------------------


def test_max_delay_from_earliest_timestamp(store):
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(3, [500, 300, 700]), recs(3, [400, 900, 800]))
    e = ev(log, c, 5000)
    # E = 300 (the minimum, not the first record's timestamp); delay = (5000 - 1000) - 300
    assert e.max_compaction_delay_ms == 3700
    assert e.eligible and e.reason == "max_compaction_lag"


def test_max_delay_zero_timestamps_ignored(store):
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(3, [0, 0, 2500]), recs(2, [0, 2600]))
    e = ev(log, c, 5000)
    assert e.max_compaction_delay_ms == 5000 - 1000 - 2500
    # only zero timestamps: no E, no delay
    log2 = build(store, "y-0", c, recs(3, 0))
    e2 = ev(log2, c, 10**12)
    assert e2.max_compaction_delay_ms == 0 and not e2.eligible


def test_max_delay_not_positive_is_zero(store):
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(3, 4000))
    assert ev(log, c, 5000).max_compaction_delay_ms == 0  # exactly due: not positive
    assert not ev(log, c, 5000).eligible
    assert ev(log, c, 5001).max_compaction_delay_ms == 1
    assert ev(log, c, 5001).reason == "max_compaction_lag"
    assert ev(log, c, 100).max_compaction_delay_ms == 0  # now earlier than the records


def test_max_delay_int64_max_lag_never_due(store):
    c = cfg(min_cleanable_dirty_ratio=1)  # max.compaction.lag.ms = int64 max
    log = build(store, "x-0", c, recs(3, 1))
    for now in (0, 10**15, INT64_MAX - 1, INT64_MAX):
        e = ev(log, c, now)
        assert e.max_compaction_delay_ms == 0 and not e.eligible


def test_max_delay_saturates_and_is_exact(store):
    c = cfg(max_compaction_lag_ms=1, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(1, 1))
    e = ev(log, c, INT64_MAX)
    assert e.max_compaction_delay_ms == INT64_MAX - 2
    assert isinstance(e.max_compaction_delay_ms, int)


def test_max_delay_scope_from_first_dirty_segment(store):
    c = cfg(max_compaction_lag_ms=5000, min_cleanable_dirty_ratio=1)
    # S0 [0,3) ts 10 (clean), S1 [3,6) ts 2001, 50, 2002 (straddles first dirty), S2 [6,9) ts 3000
    log = build(store, "x-0", c, recs(3, 10), recs(3, [2001, 50, 2002]), recs(3, 3000))
    assert [(s.base_offset, s.next_offset) for s in log.manifest().segments[:-1]] == [(0, 3), (3, 6), (6, 9)]
    writer.set_checkpoint(log, 5)
    e = ev(log, c, 100_000)
    # S0 is wholly clean and ignored; every visible record of the straddling S1 counts (50, below
    # first_dirty)
    assert e.max_compaction_delay_ms == 100_000 - 5000 - 50
    writer.set_checkpoint(log, 6)
    assert ev(log, c, 100_000).max_compaction_delay_ms == 100_000 - 5000 - 3000


def test_max_delay_includes_min_lag_blocked_segments(store):
    c = cfg(max_compaction_lag_ms=5000, min_compaction_lag_ms=5000, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(3, 9000), recs(3, 3000))
    e = ev(log, c, 10_000)
    # S0 is too young (9000 > 5000): U = 0, nothing cleanable...
    assert e.first_uncleanable_offset == 0 and e.cleanable_bytes == 0
    # ...but its blocked successor still counts for the delay
    assert e.max_compaction_delay_ms == (10_000 - 5000) - 3000
    # delay > 0 without cleanable bytes is not eligible
    assert not e.eligible


def test_max_delay_needs_cleanable_bytes(store):
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "x-0", c, recs(3, 100))
    writer.set_checkpoint(log, 3)  # everything clean
    e = ev(log, c, 10_000)
    assert e.cleanable_bytes == 0 and e.max_compaction_delay_ms == 0 and not e.eligible


# --- deadline roll ------------------------------------------------------------------------------------------


def test_deadline_roll_is_strict(store):
    c = cfg(segment_ms=5000, min_cleanable_dirty_ratio=0)
    log = build(store, "dl-0", c, recs(3, [1000, 1500, 1200]), roll_last=False)
    e = ev(log, c, 6000)  # now - roll interval == earliest timestamp: not older
    assert not e.deadline_roll
    assert e.first_uncleanable_offset == 0 and e.cleanable_bytes == 0 and not e.eligible
    e = ev(log, c, 6001)
    assert e.deadline_roll
    # figures as if the active segment had been sealed
    assert e.first_uncleanable_offset == 3 and e.cleanable_bytes == 3 * REC
    assert e.eligible and e.reason == "dirty_ratio"
    # evaluating changes nothing stored
    assert len(log.manifest().segments) == 1


def test_deadline_roll_interval_is_min_of_segment_ms_and_max_lag(store):
    c = cfg(segment_ms=10_000, max_compaction_lag_ms=2000)
    log = build(store, "dl-0", c, recs(2, 1000), roll_last=False)
    assert not ev(log, c, 3000).deadline_roll
    assert ev(log, c, 3001).deadline_roll
    # a topic without compact rolls on segment.ms only
    d = cfg(cleanup_policy="delete", segment_ms=10_000, max_compaction_lag_ms=2000)
    assert not ev(log, d, 3001).deadline_roll
    assert not ev(log, d, 11_000).deadline_roll
    assert ev(log, d, 11_001).deadline_roll


def test_deadline_roll_uses_earliest_timestamp_of_active(store):
    c = cfg(segment_ms=1000)
    log = build(store, "dl-0", c, recs(3, [900, 500, 950]), roll_last=False)
    assert not ev(log, c, 1500).deadline_roll
    assert ev(log, c, 1501).deadline_roll


def test_empty_active_segment_never_deadline_rolled(store):
    c = cfg(segment_ms=1)
    log = build(store, "dl-0", c, recs(3, 1))
    assert log.manifest().active.empty
    assert not ev(log, c, 10**12).deadline_roll
    assert not planner.evaluate(store.log("none-0").manifest(), c, 10**12).deadline_roll


def test_prepare_seals_active_on_deadline(store):
    c = cfg(segment_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "dl-0", c, recs(3, 100), roll_last=False)
    before = log.manifest()
    engine.dry_run(log, c, 5000)
    assert log.manifest().version == before.version
    m, e = engine.prepare(log, c, 5000)
    assert [(s.base_offset, s.next_offset) for s in m.segments] == [(0, 3), (3, 3)]
    assert m.active.empty and not e.deadline_roll
    assert e.first_uncleanable_offset == 3


def test_deadline_roll_and_max_delay(store):
    # KIP-354 as a real deadline: an idle partition becomes eligible by max.compaction.lag.ms
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=1)
    log = build(store, "dl-0", c, recs(3, 100), roll_last=False)
    e = ev(log, c, 2000)
    assert e.deadline_roll and e.max_compaction_delay_ms == 900
    assert e.eligible and e.reason == "max_compaction_lag"


# --- delete horizon and reason order --------------------------------------------------------------------


def with_horizons(log, index, horizons):
    def change(m):
        segs = list(m.segments)
        base = segs[index].base_offset  # the tombstones are the segment's first records
        segs[index] = replace(
            segs[index],
            horizons=tuple((h, c, base, base + c - 1) for h, c in horizons),
            tombstones=sum(c for _, c in horizons),
        )
        return m.with_(segments=tuple(segs))

    return log.update(change)


def test_delete_horizon_reason(store):
    c = cfg(min_cleanable_dirty_ratio=1)
    log = build(store, "t-0", c, recs(3, 10), recs(3, 20))
    writer.set_checkpoint(log, 3)
    with_horizons(log, 0, [(5000, 2)])
    e = ev(log, c, 4999)
    assert e.expired_tombstones == 0 and not e.eligible
    e = ev(log, c, 5000)  # horizon <= now
    assert e.expired_tombstones == 2 and e.eligible and e.reason == "delete_horizon"
    # a horizon in the dirty section does not count
    writer.set_checkpoint(log, 0)
    assert ev(log, c, 10**9).expired_tombstones == 0


def test_reason_order(store):
    log = build(store, "t-0", cfg(), recs(2, 10), recs(2, 20), recs(2, 30))
    writer.set_checkpoint(log, 2)  # ratio 4/6
    with_horizons(log, 0, [(100, 1)])
    now = 10_000
    all_three = cfg(min_cleanable_dirty_ratio=0.5, max_compaction_lag_ms=1000)
    e = ev(log, all_three, now)
    assert e.dirty_ratio > 0.5 and e.max_compaction_delay_ms > 0 and e.expired_tombstones > 0
    assert e.reason == "dirty_ratio"
    lag_and_horizon = cfg(min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=1000)
    assert ev(log, lag_and_horizon, now).reason == "max_compaction_lag"
    horizon_only = cfg(min_cleanable_dirty_ratio=0.9)
    assert ev(log, horizon_only, now).reason == "delete_horizon"
    nothing = cfg(min_cleanable_dirty_ratio=0.9)
    assert ev(log, nothing, 99).reason is None


def test_held_tombstone_not_counted(store):
    c = cfg(min_cleanable_dirty_ratio=1, compaction_strategy="timestamp")
    log = build(store, "t-0", c, recs(3, 10), recs(3, 20))
    writer.set_checkpoint(log, 3)
    with_horizons(log, 0, [(100, 1)])
    # a hold on the tombstone at offset 1 by a record at offset 7 (at or above U = 6)
    log.update(lambda m: m.with_(holds=(Hold(offset=1, horizon=100, until=7),)))
    e = ev(log, c, 1000)
    assert e.expired_tombstones == 0 and not e.eligible
    # a hold whose record lies below U does not hold any more
    log.update(lambda m: m.with_(holds=(Hold(offset=1, horizon=100, until=4),)))
    assert ev(log, c, 1000).reason == "delete_horizon"


def test_delete_horizon_from_a_real_cleaning(store, spark):
    c = cfg(delete_retention_ms=1000, min_cleanable_dirty_ratio=0.5)
    log = store.log("real-0")
    writer.append(
        log,
        c,
        [
            {"key": "a", "value": "1", "timestamp": 10},
            {"key": "a", "value": None, "timestamp": 11},
            {"key": "b", "value": "2", "timestamp": 12},
        ],
    )
    writer.roll(log)
    report = engine.run(log, c, 5000, spark=spark)
    assert report.cleaned and report.stats.tombstones_stamped == 1
    m = log.manifest()
    assert m.checkpoint == 3
    assert sum(cnt for s in m.segments for _, cnt, *_ in s.horizons) == 1
    assert ev(log, c, 5999).reason is None  # horizon = 5000 + 1000
    e = ev(log, c, 6000)
    assert e.expired_tombstones == 1 and e.reason == "delete_horizon"


# --- priority across logs ----------------------------------------------------------------------------


def test_order_by_ratio_then_delay_then_name(store):
    c = cfg(max_compaction_lag_ms=1000, min_cleanable_dirty_ratio=0)
    now = 100_000

    def mk(name, clean, dirty, ts):
        log = build(store, name, c, recs(clean, ts), recs(dirty, ts))
        writer.set_checkpoint(log, clean)
        return planner.evaluate(log.manifest(), c, now)

    evs = [
        mk("b-0", 1, 1, 50_000),  # ratio 0.5, delay 49000
        mk("a-0", 1, 3, 90_000),  # ratio 0.75, delay 9000
        mk("c-0", 1, 1, 10_000),  # ratio 0.5, delay 89000
        mk("a-1", 1, 1, 50_000),  # ratio 0.5, delay 49000 (ties with b-0: by name)
        mk("z-0", 1, 3, 99_500),  # ratio 0.75, delay 0
    ]
    ordered = [e.log for e in planner.order(evs)]
    assert ordered == ["a-0", "z-0", "c-0", "a-1", "b-0"]
    assert planner.order(list(reversed(evs))) == planner.order(evs)
    assert planner.order([]) == []


def test_priority_compares_ratio_before_delay(store):
    c = cfg(max_compaction_lag_ms=1, min_cleanable_dirty_ratio=0)
    hi_ratio = build(store, "z-9", c, recs(1, 999_999))
    lo_ratio = build(store, "a-0", c, recs(1, 1), recs(1, 1))
    writer.set_checkpoint(lo_ratio, 1)
    e1 = ev(hi_ratio, c, 10**6)
    e2 = ev(lo_ratio, c, 10**6)
    assert e1.dirty_ratio > e2.dirty_ratio and e1.max_compaction_delay_ms < e2.max_compaction_delay_ms
    assert [e.log for e in planner.order([e2, e1])] == ["z-9", "a-0"]


# --- roll rules at append (SPEC §1), used by the figures above ---------------------------------------------


def test_find_rolls_bytes_and_interval():
    import numpy as np

    sizes = np.array([10, 10, 10, 10], dtype=np.int64)
    ts = np.array([0, 0, 0, 0], dtype=np.int64)
    assert writer.find_rolls(sizes, ts, 0, None, 20, 10**9) == [2]  # 10+10 <= 20; +10 > 20
    assert writer.find_rolls(sizes, ts, 15, 0, 20, 10**9) == [0, 2]  # active already at 15
    ts = np.array([100, 150, 201, 250], dtype=np.int64)
    assert writer.find_rolls(sizes, ts, 0, None, 10**9, 100) == [2]  # 201 - 100 > 100
    assert writer.find_rolls(sizes, np.array([100, 150, 200, 250]), 0, None, 10**9, 100) == [3]


def test_append_roll_keeps_offset_gap_in_sealed_segment(store):
    c = cfg(segment_bytes=2 * REC)
    log = store.log("g-0")
    writer.append(log, c, recs(3, 1, offsets=[0, 1, 9]))
    m = log.manifest()
    assert [(s.base_offset, s.next_offset, s.records) for s in m.segments] == [(0, 9, 2), (9, 10, 1)]
