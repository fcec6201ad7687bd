"""What this process may take: its memory budget, the memory available to it (within its container's
limit) and the driver's result limit, and whether rows of a given cost fit them (`fits_here`).

A cleaning brings the probe's newer winners, a collected decision and a local write's kept offsets here,
and the latest state is built here, each only within a share of the memory available
(`CleanerTuning.driver_memory_share`) and within the process's budget (COMPACTION_MEMORY_BUDGET,
`in_process_memory`); what Spark ships here also stays within `spark.driver.maxResultSize`. The budget's
default is today's share of the machine's memory or of its container's limit (BUDGET_SHARE), so that by
default the share of what is available now is the bound, and a budget set lower caps every in-process path.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from compaction_assets import settings

# results up to this size skip asking the session for its limit (a request to a Connect server for
# every small log's cleaning): taken to be below any limit a driver runs with (Spark's default: 1 GiB)
MIN_RESULT_LIMIT = 1 << 20
# the budget's default share of the machine's (or container's) memory: the in-process paths' share
# (CleanerTuning.driver_memory_share), as before there was a budget
BUDGET_SHARE = 0.25
_SIZE = re.compile(r"\s*(\d+)\s*([kmgtp]?)i?b?\s*", re.IGNORECASE)


@dataclass(frozen=True)
class RowCost:
    """What one row brought here costs: in this process at the peak, and in the job's results."""

    held: int
    shipped: int


def fits_here(spark, rows: int, limit: int, cost: RowCost, share: float, shipped: bool = True) -> bool:
    """Whether `rows` rows of `cost` may come here: at most `limit` when the tuning gives one (-1: none),
    else (0) within `share` of the available memory and, when Spark ships them (`shipped`), within the
    driver's result limit."""
    if limit:
        return rows <= limit
    if rows * cost.held > in_process_memory(share):
        return False
    return not shipped or rows * cost.shipped <= MIN_RESULT_LIMIT or rows * cost.shipped <= result_limit(spark)


def memory_budget(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """COMPACTION_MEMORY_BUDGET, or its default: BUDGET_SHARE of the machine's memory, or of its container's
    limit when lower."""
    budget = settings.current().memory_budget
    return budget if budget is not None else int(BUDGET_SHARE * total_memory(cgroup_root))


def in_process_memory(share: float) -> float:
    """What an in-process path may take: `share` of the memory available now, within the budget."""
    return min(share * available_memory(), memory_budget())


def total_memory(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """The machine's memory, or its container's limit when it has a lower one."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file, *_ in _CGROUP_FILES:
        try:
            with open(os.path.join(cgroup_root, limit_file)) as f:
                limit = f.read().strip()
        except OSError:
            continue
        return machine if limit == "max" or not limit.isdigit() else min(machine, int(limit))
    return machine


def available_memory(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """Bytes this process may still take: the machine's available memory, within its container's limit
    when it has one (a container's /proc/meminfo shows the host's memory, and past the limit the kernel
    kills the process instead of reclaiming)."""
    machine, headroom = _machine_available(), _container_headroom(cgroup_root)
    return machine if headroom is None else min(machine, headroom)


def _machine_available() -> int:
    """/proc/meminfo's MemAvailable, or the free pages where there is none."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux: the free pages, which leave out the page cache
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


# the container's limit, usage and memory statistics: cgroup v2's files, then v1's
_CGROUP_FILES = (
    ("memory.max", "memory.current", "memory.stat", "inactive_file"),
    ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat", "total_inactive_file"),
)


def _container_headroom(root: str) -> int | None:
    """The memory cgroup's limit less what it holds beyond reclaimable file pages (as the kubelet counts
    a container's working set); None without a limit."""
    for limit_file, usage_file, stat_file, inactive in _CGROUP_FILES:
        try:
            with open(os.path.join(root, limit_file)) as f:
                limit = f.read().strip()
            with open(os.path.join(root, usage_file)) as f:
                usage = int(f.read())
            with open(os.path.join(root, stat_file)) as f:
                cache = next((int(line.split()[1]) for line in f if line.split()[0] == inactive), 0)
        except (OSError, ValueError, IndexError):
            continue
        if limit == "max" or int(limit) >= 1 << 60:  # v1 writes "no limit" as a page-rounded 2^63
            return None
        return max(0, int(limit) - max(0, usage - cache))
    return None


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
