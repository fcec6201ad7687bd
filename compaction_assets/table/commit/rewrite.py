"""Rewriting the buckets whose position deletes pile up: reads stay fast, and masked values leave the files.

A commit masks a changed key's old row with a position delete (delta.py); the row's bytes stay in its
data file until the file is rewritten. A bucket (one log partition's `key_bucket`) is rewritten, its live
rows into new files and its data and delete files removed, in one snapshot that carries the table's log
marks unchanged, when any of:
- its masked rows are more than REWRITE_MASKED_SHARE of its rows and at least REWRITE_MIN_MASKED (a read
  filters them out; a few in a small bucket cost a read nothing),
- it has more than REWRITE_MAX_DATA_FILES data files (each commit adds small ones),
- it has a delete file older than half the topic's `delete.retention.ms`: so a deleted value's bytes leave
  the live files by then, and leave every file once the snapshots before the rewrite expire (expiry.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from compaction_assets.table.commit.delta import row_delta
from compaction_assets.table.schema import partitions_filter

if TYPE_CHECKING:
    from pyiceberg.table import FileScanTask, Table

REWRITE_MASKED_SHARE = 0.2
REWRITE_MIN_MASKED = 256
REWRITE_MAX_DATA_FILES = 8
REWRITTEN = "compaction.rewritten-buckets"


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite of a table's due buckets did."""

    buckets: int = 0
    files_removed: int = 0  # data and delete files
    files_added: int = 0
    snapshot_id: int | None = None


def _old_delete_files(table: Table, before_ms: int) -> set[str]:
    """The live delete files committed before `before_ms` (or by an expired snapshot). Only the deletes
    manifests whose oldest entry is that old are read: a manifest's minimum sequence number dates it."""
    from pyiceberg.manifest import ManifestContent

    current = table.current_snapshot()
    times = {s.sequence_number: s.timestamp_ms for s in table.metadata.snapshots}
    by_id: dict[int | None, int] = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    old: set[str] = set()
    for manifest in current.manifests(table.io) if current is not None else []:
        if manifest.content != ManifestContent.DELETES or times.get(manifest.min_sequence_number, 0) >= before_ms:
            continue
        old.update(
            e.data_file.file_path
            for e in manifest.fetch_manifest_entry(table.io, discard_deleted=True)
            if by_id.get(e.snapshot_id, 0) < before_ms
        )
    return old


def _bucket(task: FileScanTask) -> tuple[int, tuple[object, ...]]:
    """A data file's bucket: its partition spec and its partition's values (log partition, key bucket)."""
    partition = task.file.partition
    return task.file.spec_id, tuple(partition[i] for i in range(len(partition)))


def due_buckets(table: Table, partitions: list[int], now_ms: int, retention_ms: int) -> list[list[FileScanTask]]:
    """The file scan tasks of each bucket of `partitions` due for a rewrite."""
    groups: dict[tuple, list[FileScanTask]] = defaultdict(list)
    for task in table.scan(row_filter=partitions_filter(partitions)).plan_files():
        groups[_bucket(task)].append(task)
    old = _old_delete_files(table, now_ms - retention_ms // 2) if groups else set()
    due = []
    for tasks in groups.values():
        deletes = {d.file_path: d for t in tasks for d in t.delete_files}
        rows = sum(t.file.record_count for t in tasks)
        masked = sum(d.record_count for d in deletes.values())
        if (
            masked > max(REWRITE_MASKED_SHARE * rows, REWRITE_MIN_MASKED - 1)
            or len(tasks) > REWRITE_MAX_DATA_FILES
            or any(path in old for path in deletes)
        ):
            due.append(tasks)
    return due


def rewrite(
    table: Table, partitions: list[int], now_ms: int, retention_ms: int, properties: dict[str, str]
) -> RewriteResult:
    """Rewrite the due buckets of `partitions` in one snapshot with `properties` (the marks it carries);
    nothing when none is due or another commit wins the race (the next run rewrites them)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    from compaction_assets.table.iceberg_internals import write_data_files

    due = due_buckets(table, partitions, now_ms, retention_ms)
    if not due:
        return RewriteResult()
    tasks = [t for bucket in due for t in bucket]
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
    removed = {t.file.file_path for t in tasks} | {d.file_path for t in tasks for d in t.delete_files}
    tx = table.transaction()
    added = write_data_files(tx, rows, table.io)
    try:
        row_delta(tx, {**properties, REWRITTEN: str(len(due))}, added, removed).commit()
        committed = tx.commit_transaction()
    except CommitFailedException:
        return RewriteResult()
    except Exception as exc:
        if "locked" in str(exc).lower():  # SQLite's writer lock: another process commits now
            return RewriteResult()
        raise
    snapshot = committed.current_snapshot()
    assert snapshot is not None  # the transaction committed one
    return RewriteResult(len(due), len(removed), len(added), snapshot.snapshot_id)
