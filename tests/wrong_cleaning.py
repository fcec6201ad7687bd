"""A wrong cleaning, handed to the product as its tuning (no module patched): it decides right, then
writes nothing, so superseded records stay visible and the checks must catch it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from compaction_assets.cleaning.decide.decision import Decision
from compaction_assets.cleaning.layout import rewrite_plan
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from resources.log_store import LogStoreResource


def writes_nothing(when: Callable[[Decision], bool] = lambda decision: True) -> CleanerTuning:
    """The product's tuning but its rewrite plan: nothing rewritten or marked for decisions `when` holds."""

    def plan(decision: Decision, tuning: CleanerTuning) -> tuple[list[int], list[int]]:
        return ([], []) if when(decision) else rewrite_plan(decision, tuning)

    return replace(DEFAULT_TUNING, rewrite_plan=plan)


def store_cleaning_with(resource: LogStoreResource, tuning: CleanerTuning) -> LogStoreResource:
    """The same log store resource, whose cleanings (assets and batches) use `tuning`."""

    class TunedLogStore(LogStoreResource):
        def cleaner_tuning(self) -> CleanerTuning:
            return tuning

    return TunedLogStore(**resource.model_dump())
