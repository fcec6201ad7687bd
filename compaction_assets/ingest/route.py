"""Where an ingestion reads and shapes its landed files, and why: in this process, or in Spark tasks when its
backlog is larger than the memory budget (COMPACTION_MEMORY_BUDGET) or the caller asks for Spark (`ingest
--spark`). Either way each unit is committed on the driver, in order, under the same exactly-once rules
(ingest/spark_units.py). The route is said in the ingestion's report (`path`, `why`), as a table commit
says its own (table/commit/route.py).

The callers offer Spark (`SparkOffer`): the budget is the cleaning's (cleaning/decide/placement.py), a layer
above this one, and the session is theirs to open, only when the route goes to Spark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

IN_PROCESS = "in-process"  # read and shaped in this process, the next unit read while one is appended
SPARK = "spark"  # read and shaped by Spark tasks, committed here in order


@dataclass(frozen=True)
class IngestRoute:
    """Where an ingestion's units are read and shaped (`path`: IN_PROCESS or SPARK), and why, in words."""

    path: str
    why: str


@dataclass(frozen=True)
class SparkOffer:
    """What lets an ingestion go to Spark: the session (opened only when it does), the memory budget its
    backlog is held to, and whether the caller asks for Spark whatever the backlog."""

    session: Callable[[], Any]
    budget: int
    requested: bool = False


NOT_OFFERED = IngestRoute(IN_PROCESS, "no Spark session was offered to this ingestion")


def _mib(size: int) -> str:
    return f"{size / 2**20:.0f} MiB"


def ingest_route(backlog_bytes: int, offer: SparkOffer | None) -> IngestRoute:
    """The route of an ingestion of `backlog_bytes` of pending files: Spark when asked, or past the budget."""
    if offer is None:
        return NOT_OFFERED
    if offer.requested:
        return IngestRoute(SPARK, f"asked for: Spark tasks read and shape its backlog ({_mib(backlog_bytes)})")
    if backlog_bytes > offer.budget:
        return IngestRoute(
            SPARK,
            f"its backlog ({_mib(backlog_bytes)}) is past COMPACTION_MEMORY_BUDGET ({_mib(offer.budget)}): "
            "Spark tasks read and shape its files, committed here in order",
        )
    return IngestRoute(
        IN_PROCESS,
        f"its backlog ({_mib(backlog_bytes)}) is within COMPACTION_MEMORY_BUDGET ({_mib(offer.budget)}): "
        "read and shaped in this process",
    )
