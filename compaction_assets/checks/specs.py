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

# What a compacted_log materialization records for its checks (metadata keys), and the name of the
# pin that keeps those manifest versions (and their files) until the next cleaning's checks.
BEFORE_VERSION = "before_version"
AFTER_VERSION = "after_version"
EVALUATED_AT_MS = "evaluated_at_ms"
CHECKS_PIN = "checks"

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
    CheckSpec(
        LATEST_VALUE_PER_KEY,
        "Recomputes every key's winner (SPEC §6, by the topic's strategy) from the log "
        "before the cleaning; the cleaned range keeps exactly it, and no other record.",
        ERROR,
    ),
    CheckSpec(
        TOMBSTONE_RETENTION,
        "No tombstone removed before its horizon or while held, none kept after it "
        "unless held, horizons stamped right, no deleted key back, removed deletes remembered.",
        ERROR,
    ),
    CheckSpec(
        OFFSETS_AND_ORDER_PRESERVED,
        "Surviving records are the input's, offsets and order unchanged; nothing "
        "at or above the first uncleanable offset changed; segments merged as SPEC §6 says.",
        ERROR,
    ),
    CheckSpec(
        MAX_COMPACTION_DELAY,
        "No dirty record the cleaning could reach waits longer than "
        "max.compaction.lag.ms; the active segment is sealed at its deadline.",
        WARN,
    ),
)
CHECKS_BY_NAME = {spec.name: spec for spec in CHECK_SPECS}
