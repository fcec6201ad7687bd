"""Cleaner tunings that several tests share."""

from __future__ import annotations

from dataclasses import replace

from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning


def mark_only(base: CleanerTuning = DEFAULT_TUNING) -> CleanerTuning:
    """`base` with every segment marked in the deletion vector, never rewritten: both rewrite lines (the
    first marking's and the one for a segment listed already) above any share of dead rows."""
    return replace(base, rewrite_dead_fraction=1.01, first_mark_dead_fraction=1.01)
