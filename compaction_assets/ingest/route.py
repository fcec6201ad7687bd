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

from compaction_assets.spark.lazy_session import local_master_cores, master_named_by, session_target

IN_PROCESS = "in-process"  # read and shaped in this process, the next unit read while one is appended
SPARK = "spark"  # read and shaped by Spark tasks, committed here in order


@dataclass(frozen=True)
class IngestRoute:
    """Where an ingestion's units are read and shaped (`path`: IN_PROCESS or SPARK), and why, in words."""

    path: str
    why: str


def configured_master() -> str | None:
    """The master the settings send a session to, found without starting one (None: a Connect server that
    only the session can name)."""
    return master_named_by(session_target())


@dataclass(frozen=True)
class SparkOffer:
    """What lets an ingestion go to Spark: the session (opened only when it does), the memory budget its
    backlog is held to, whether the caller asks for Spark whatever the backlog, and the master its tasks
    would run on (asked only past the budget)."""

    session: Callable[[], Any]
    budget: int
    requested: bool = False
    master: Callable[[], str | None] = configured_master


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
        master = offer.master()
        if master is not None and local_master_cores(master) is not None:
            # this process holds a few files at a time whatever the backlog, and a local master's tasks share
            # its cores at about twice its CPU (docs/performance.md): Spark pays only where it adds machines
            return IngestRoute(
                IN_PROCESS,
                f"its backlog ({_mib(backlog_bytes)}) is past COMPACTION_MEMORY_BUDGET ({_mib(offer.budget)}), "
                f"but Spark's master ({master}) is this machine: read here a few files at a time "
                "(`ingest --spark` asks for Spark)",
            )
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
