"""The asset checks' names, what each asserts and how much a failure matters (no Dagster here).

A blocking check (severity ERROR) that fails stops the steps downstream of the compacted log; a WARN
check is reported only.
"""

from __future__ import annotations

from dataclasses import dataclass

LATEST_VALUE_PER_KEY = "latest_value_per_key"
TOMBSTONE_RETENTION = "tombstone_retention"
OFFSETS_AND_ORDER_PRESERVED = "offsets_and_order_preserved"
MAX_COMPACTION_DELAY = "max_compaction_delay"

ERROR = "ERROR"
WARN = "WARN"


@dataclass(frozen=True)
class CheckSpec:
    """One check: its name, what it asserts, and its severity (ERROR blocks downstream steps)."""
    name: str
    description: str
    severity: str

    @property
    def blocking(self) -> bool:
        """True when a failure of this check stops the steps downstream of the compacted log."""
        return self.severity == ERROR


CHECK_SPECS: tuple[CheckSpec, ...] = (
    CheckSpec(LATEST_VALUE_PER_KEY, "Recomputes every key's winner from the log before the cleaning; the output "
              "keeps exactly it.", ERROR),
    CheckSpec(TOMBSTONE_RETENTION, "No tombstone removed before its horizon, none kept after it (unless held), "
              "no deleted key back.", ERROR),
    CheckSpec(OFFSETS_AND_ORDER_PRESERVED, "Surviving offsets are a subset of the input's, in order; nothing at or "
              "above the first uncleanable offset changed.", ERROR),
    CheckSpec(MAX_COMPACTION_DELAY, "No dirty record waits longer than max.compaction.lag.ms.", WARN),
)
CHECKS_BY_NAME = {spec.name: spec for spec in CHECK_SPECS}
