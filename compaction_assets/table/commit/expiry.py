"""Deletes that really delete: old snapshots expired, and the files only they reached removed.

A tombstoned key leaves the table in the snapshot that commits the tombstone's log version (a position
delete masks its row); the runs that clean a log commit its table, and a cleaning is due within
`max.compaction.lag.ms` of a record. The masked row's bucket is rewritten without it by the first run
after half of `delete.retention.ms` (rewrite.py). Every commit then expires the snapshots older than the
topic's `delete.retention.ms` (the current one is always kept) and removes the data, delete and manifest
files that no remaining snapshot reaches. So a deleted value is unreachable through the table, by any
snapshot or file, once `max.compaction.lag.ms + 1.5 x delete.retention.ms` have passed since its
tombstone (and runs have happened since). Time travel works within `delete.retention.ms`.

Files younger than a grace period are never removed: they may be a concurrent commit's, not yet
referenced. pyiceberg expires snapshots but does not remove files; the removal is here.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlparse

from compaction_assets.store.fs import Storage

ORPHAN_GRACE_MS = 600_000  # a file younger than this may be a commit in flight (the store's GC grace)
REMOVABLE = ("/data/", "/metadata/")


@dataclass(frozen=True)
class ExpiryResult:
    """Snapshots expired and unreachable files removed by one expiry."""

    snapshots_expired: int = 0
    files_removed: int = 0


def _path(uri: str) -> str:
    """A table file's URI as its Storage names it (a local path, or bucket/key)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return parsed.path
    return f"{parsed.netloc}{parsed.path}"


def reachable_files(table) -> set[str]:
    """Every manifest list, manifest and data file a snapshot of `table` reaches (each manifest read once)."""
    io = table.io
    seen_manifests: set[str] = set()
    out: set[str] = set()
    for snapshot in table.metadata.snapshots:
        out.add(_path(snapshot.manifest_list))
        for manifest in snapshot.manifests(io):
            if manifest.manifest_path in seen_manifests:
                continue
            seen_manifests.add(manifest.manifest_path)
            out.add(_path(manifest.manifest_path))
            out.update(_path(e.data_file.file_path) for e in manifest.fetch_manifest_entry(io, discard_deleted=True))
    return out


def remove_unreachable(table, now_ms: int, grace_ms: int = ORPHAN_GRACE_MS) -> int:
    """Remove the table's data and manifest files no snapshot reaches and older than `grace_ms`; how many."""
    st = Storage.open(table.location())
    keep = reachable_files(table)
    removed = 0
    for path, mtime in st.list_files_with_mtime(st.root):
        rel = path[len(st.root) :]
        if path in keep or not rel.startswith(REMOVABLE) or rel.endswith(".metadata.json") or mtime > now_ms - grace_ms:
            continue
        st.delete(path)
        removed += 1
    return removed


def expire(
    table, now_ms: int, retention_ms: int, *, grace_ms: int = ORPHAN_GRACE_MS, failed_attempts: bool = False
) -> ExpiryResult:
    """Expire the snapshots older than `retention_ms` at `now_ms` (never the current one), then remove
    what no snapshot reaches any more (also after commits that lost a race and left files)."""
    from pyiceberg.exceptions import CommitFailedException

    current = table.current_snapshot()
    old = [
        s.snapshot_id
        for s in table.metadata.snapshots
        if s.timestamp_ms < now_ms - retention_ms and (current is None or s.snapshot_id != current.snapshot_id)
    ]
    if old:
        try:
            table.maintenance.expire_snapshots().by_ids(old).commit()
        except CommitFailedException:  # a concurrent commit: the next run expires them
            return ExpiryResult()
        table = table.refresh()
    if not old and not failed_attempts:
        return ExpiryResult()
    return ExpiryResult(len(old), remove_unreachable(table, now_ms, grace_ms))
