"""What a cleaning may bring to this process: fast paths bounded by the memory they need, not a row count.

The probe's newer winners (with their keys), a collected decision's winners and a local write's kept
offsets each come here through one Spark collect. They are bounded by what holds them: a share of the memory this machine has available
(`CleanerTuning.driver_memory_share`) and the driver's result limit (`spark.driver.maxResultSize`, 1 GiB
unless set), each row at its cost below. The row count this replaced (1M newer rows) sent a cleaning after
10% new records of a 20M-record log down the general path, grouping every key (issue 32); a tuning that
gives a row limit still has it (tests: -1 sends every log down the general path).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# results up to this size skip asking the session for its limit (a request to a Connect server for
# every small log's cleaning): taken to be below any limit a driver runs with (Spark's default: 1 GiB)
MIN_RESULT_LIMIT = 1 << 20
_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class RowCost:
    """What one row brought here costs: in this process at the peak, and in the job's results."""
    held: int
    shipped: int


# a collected winner of the offset strategy (its offset and WINNER_FIELDS): about 140 bytes at the peak
# (the Arrow table, then its decision columns; 5M distinct keys: 0.4 GB more than caching it in Spark)
COLLECTED_WINNER = RowCost(held=140, shipped=40)
# a kept offset that a write here receives: (unit, offset), 12 bytes each
KEPT_OFFSET = RowCost(held=12, shipped=12)


def newer_winner(record_bytes: int) -> RowCost:
    """A newer winner the probe collects: a collected winner with its key (at most `record_bytes`, the
    newer records' logical bytes a record: key, value and 16 bytes)."""
    return RowCost(COLLECTED_WINNER.held + record_bytes, COLLECTED_WINNER.shipped + record_bytes)


def fits_here(spark, rows: int, limit: int, cost: RowCost, share: float) -> bool:
    """Whether `rows` rows of `cost` may come here: at most `limit` when the tuning gives one (-1: none),
    else (0) within `share` of the available memory and within the driver's result limit."""
    if limit:
        return rows <= limit
    if rows * cost.held > share * available_memory():
        return False
    return rows * cost.shipped <= MIN_RESULT_LIMIT or rows * cost.shipped <= result_limit(spark)


def available_memory() -> int:
    """Bytes this machine has available now (/proc/meminfo's MemAvailable, or its free pages)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux: the free pages, which leave out the page cache
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def result_limit(spark) -> float:
    """spark.driver.maxResultSize in bytes (1 GiB when the session does not say; 0 is unlimited)."""
    try:
        text = spark.conf.get("spark.driver.maxResultSize", "1g") or "1g"
    except Exception:  # a session that does not show its conf: Spark's default
        text = "1g"
    match = _SIZE.fullmatch(text)
    if match is None:
        return float(1 << 30)
    size = int(match.group(1)) * 1024 ** "bkmgtp".index((match.group(2) or "b").lower())
    return float("inf") if size == 0 else float(size)
