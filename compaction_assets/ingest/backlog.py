"""A log's landing backlog: the landed files not yet ingested (how many, their bytes, how long the oldest has
waited) and the files set aside, from one listing of the landing area and the log's manifest. What
`landing status` and `ingest --dry-run` print, the discovery sensor observes in Dagster and `metrics`
exposes (`store_backlog`, every log of a store)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from compaction_assets.ingest.connectors.layouts import LandedFile, recorded_names
from compaction_assets.ingest.landing import landing_logs, pending_files
from compaction_assets.ingest.quarantine import Quarantine, SetAside
from compaction_assets.store.log_store import LogStore


@dataclass(frozen=True)
class LandingBacklog:
    """One log's landing backlog at `now_ms`."""

    log: str
    pending: tuple[LandedFile, ...]  # landed, not ingested, not set aside; in ingestion (name) order
    set_aside: tuple[SetAside, ...]
    files_ingested: int  # landing files the log's manifest records as ingested
    now_ms: int

    @property
    def pending_bytes(self) -> int:
        """The pending files' size, as the landing area's listing gave it."""
        return sum(f.size_bytes for f in self.pending)

    @property
    def oldest_pending_mtime_ms(self) -> int | None:
        """When the oldest pending file landed (its modification time); None when nothing is pending."""
        return min((f.mtime_ms for f in self.pending), default=None)

    @property
    def oldest_pending_age_ms(self) -> int | None:
        """How long the oldest pending file has waited; None when nothing is pending."""
        oldest = self.oldest_pending_mtime_ms
        return None if oldest is None else max(0, self.now_ms - oldest)

    @property
    def fingerprint(self) -> str:
        """What changes when a file becomes pending, is ingested, or is set aside or released (not the age)."""
        names = [f.name for f in self.pending] + ["aside:" + e.file for e in self.set_aside]
        return hashlib.sha1("\n".join(names).encode()).hexdigest()[:12]

    def as_document(self, names: bool = False) -> dict[str, Any]:
        """As the CLI prints it; `names`: the pending files' names too."""
        document: dict[str, Any] = {
            "log": self.log,
            "pending_files": len(self.pending),
            "pending_bytes": self.pending_bytes,
            "oldest_pending_age_ms": self.oldest_pending_age_ms,
            "oldest_pending_mtime_ms": self.oldest_pending_mtime_ms,
            "files_ingested": self.files_ingested,
            "files_set_aside": len(self.set_aside),
            "set_aside": [e.as_document() for e in self.set_aside],
        }
        if names:
            document["pending"] = [f.name for f in self.pending]
        return document


def landing_backlog(
    log: str, source: Any | None, ingested: tuple[str, ...], set_aside: list[SetAside], now_ms: int
) -> LandingBacklog:
    """The backlog of `log` from its PartitionSource (None: nothing landed for it), the `ingested` entries of
    its manifest (() for a log not yet in the store) and its files set aside."""
    names = frozenset(name for entry in set_aside for name in entry.files)
    pending = tuple(pending_files(source, ingested, names)) if source is not None else ()
    return LandingBacklog(log, pending, tuple(set_aside), len(recorded_names(ingested)), now_ms)


def backlogs_of(store: LogStore, found: dict[str, Any], logs: list[str], now_ms: int) -> list[LandingBacklog]:
    """The backlog of each of `logs`, from `found` (landing_logs': each log's PartitionSource), the store's
    manifests and the files set aside in it (nothing is written)."""
    quarantine = Quarantine(store.storage) if store.exists() else None

    def backlog(log: str) -> LandingBacklog:
        handle = store.log(log)
        ingested = tuple(handle.manifest().ingested) if handle.exists() else ()
        aside = quarantine.of(log) if quarantine is not None else []
        return landing_backlog(log, found.get(log), ingested, aside, now_ms)

    return store.per_log(logs, backlog)


def store_backlog(store: LogStore, landing: str, now_ms: int) -> dict[str, LandingBacklog]:
    """The backlog of every log with a landing folder in `landing` (the files a topic deletion or a
    quarantine set aside left out); {} when there is no landing area. What `metrics` exposes."""
    found, _ = landing_logs(landing, store.storage)
    return {b.log: b for b in backlogs_of(store, found, sorted(found), now_ms)}
