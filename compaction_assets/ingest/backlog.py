"""The landing backlog: per log, the landed files its log has not taken in yet, their bytes and the age of the
oldest, computed from the landing area and the logs' manifests alone (no file is read). What `metrics`
exposes and what any other view of the backlog can reuse: one function, `landing_backlog`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from compaction_assets.ingest.landing import landing_logs, pending_files
from compaction_assets.store.log_store import LogStore


@dataclass(frozen=True)
class LandingBacklog:
    """One log's pending landing files."""

    log: str
    files: int
    bytes: int
    oldest_mtime_ms: int | None  # the oldest pending file's modification time (None: nothing pending)

    def oldest_age_ms(self, now: int) -> int:
        """How long the oldest pending file has waited at `now` (0 when nothing is pending)."""
        return 0 if self.oldest_mtime_ms is None else max(0, now - self.oldest_mtime_ms)


def landing_backlog(store: LogStore, landing: str) -> dict[str, LandingBacklog]:
    """Each log with a landing folder in `landing`: its files not ingested yet (those a topic deletion set
    aside left out), their bytes and the oldest one's time; {} when there is no landing area."""
    found, _ = landing_logs(landing, store.storage)
    out = {}
    for log, source in sorted(found.items()):
        handle = store.log(log)
        pending = pending_files(source, handle.manifest().ingested if handle.exists() else ())
        out[log] = LandingBacklog(
            log,
            len(pending),
            _bytes(source.storage, [f.path for f in pending]),
            min((f.mtime_ms for f in pending), default=None),
        )
    return out


def _bytes(storage: Any, paths: list[str]) -> int:
    """The files' total size: a stat each on a disk, a HEAD each on an object store (the listing that found
    them keeps no size)."""
    if not paths:
        return 0
    if storage.local:
        return sum(os.path.getsize(p) for p in paths)
    return sum(info.size or 0 for info in storage.fs.get_file_info(paths))
