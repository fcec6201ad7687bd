"""Which way a log's table commit finds its change, and why: the records since the table's mark, its latest
state built in this process, or Spark tasks, chosen by COMPACTION_TABLE_MAX_STATE_BYTES.

A latest state built here holds about four to five times the log's visible bytes (state/latest_state.py); a
log past the bound has its change found and written by Spark tasks (spark_change.py), so no log is refused
for its size. The route is said in the commit's result (`path`, `why`) and by `describe`.
"""

from __future__ import annotations

from dataclasses import dataclass

from compaction_assets import settings
from compaction_assets.cleaning.decide.placement import memory_budget
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

# a state built here holds about four times its log's visible bytes: a quarter of the process's memory budget
# keeps it within the budget (the bound's default, when COMPACTION_TABLE_MAX_STATE_BYTES is unset)
BUDGET_PER_STATE_BYTE = 4
TAIL = "tail"  # the records appended since the table's mark (table/commit/tail.py)
IN_PROCESS = "in-process"  # the latest state built with Arrow in this process (or given by the caller)
SPARK = "spark"  # the change found and written by Spark tasks (table/commit/spark_change.py)


@dataclass(frozen=True)
class Route:
    """How a commit finds one log's change (`path`: TAIL, IN_PROCESS or SPARK), and why, in words."""

    path: str
    why: str


@dataclass(frozen=True)
class SparkSource:
    """A log whose change Spark tasks find, at `manifest` (no state built here)."""

    handle: LogHandle
    config: TopicConfig
    manifest: Manifest


TAIL_ROUTE = Route(TAIL, "its records since the table's mark are the whole change (offset strategy, nothing removed)")
GIVEN_ROUTE = Route(IN_PROCESS, "its latest state was built already by the run that committed it")


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def state_bound() -> int:
    """The visible bytes up to which a commit builds a log's state here: COMPACTION_TABLE_MAX_STATE_BYTES, or a
    quarter of the memory budget (COMPACTION_MEMORY_BUDGET)."""
    return settings.current().tables.max_state_bytes or memory_budget() // BUDGET_PER_STATE_BYTE


def state_route(manifest: Manifest) -> Route:
    """The way a commit that compares the log's whole latest state with the table takes: in this process
    within COMPACTION_TABLE_MAX_STATE_BYTES of visible records, by Spark tasks past it."""
    size, bound = manifest.total_size, state_bound()
    if size > bound:
        return Route(
            SPARK,
            f"its visible records ({_mib(size)}) are past COMPACTION_TABLE_MAX_STATE_BYTES ({_mib(bound)}): "
            "Spark tasks find and write its change",
        )
    return Route(
        IN_PROCESS,
        f"its visible records ({_mib(size)}) are within COMPACTION_TABLE_MAX_STATE_BYTES ({_mib(bound)}): "
        "its latest state is built in this process",
    )
