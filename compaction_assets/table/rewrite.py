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

REWRITE_MASKED_SHARE = 0.2
REWRITE_MIN_MASKED = 256
REWRITE_MAX_DATA_FILES = 8
REWRITTEN = "compaction.rewritten-buckets"


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite of a table's due buckets did."""
    buckets: int = 0
    files_removed: int = 0          # data and delete files
    files_added: int = 0
    snapshot_id: int | None = None


def _delete_file_times(table) -> dict[str, int]:
    """When each live delete file was committed (ms; 0 when its snapshot is already expired)."""
    from pyiceberg.manifest import ManifestContent

    current = table.current_snapshot()
    times: dict[str, int] = {}
    for manifest in current.manifests(table.io) if current is not None else []:
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            snapshot = table.snapshot_by_id(entry.snapshot_id)
            times[entry.data_file.file_path] = snapshot.timestamp_ms if snapshot is not None else 0
    return times


def due_buckets(table, partitions: list[int], now_ms: int, retention_ms: int) -> list[list]:
    """The file scan tasks of each bucket of `partitions` due for a rewrite."""
    from pyiceberg.expressions import In

    groups: dict[tuple, list] = defaultdict(list)
    for task in table.scan(row_filter=In("partition", set(partitions))).plan_files():
        groups[(task.file.spec_id, tuple(task.file.partition))].append(task)
    times = _delete_file_times(table) if groups else {}
    due = []
    for tasks in groups.values():
        deletes = {d.file_path: d for t in tasks for d in t.delete_files}
        rows = sum(t.file.record_count for t in tasks)
        masked = sum(d.record_count for d in deletes.values())
        oldest = min((times.get(path, 0) for path in deletes), default=now_ms)
        if (masked > max(REWRITE_MASKED_SHARE * rows, REWRITE_MIN_MASKED - 1) or len(tasks) > REWRITE_MAX_DATA_FILES
                or (deletes and oldest < now_ms - retention_ms // 2)):
            due.append(tasks)
    return due


def rewrite(table, partitions: list[int], now_ms: int, retention_ms: int, properties: dict[str, str]) -> RewriteResult:
    """Rewrite the due buckets of `partitions` in one snapshot with `properties` (the marks it carries);
    nothing when none is due or another commit wins the race (the next run rewrites them)."""
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files

    from compaction_assets.table.delta import row_delta

    due = due_buckets(table, partitions, now_ms, retention_ms)
    if not due:
        return RewriteResult()
    tasks = [t for bucket in due for t in bucket]
    rows = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks)
    removed = {t.file.file_path for t in tasks} | {d.file_path for t in tasks for d in t.delete_files}
    tx = table.transaction()
    added = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=table.io)) if len(rows) else []
    try:
        row_delta(tx, {**properties, REWRITTEN: str(len(due))}, added, removed).commit()
        committed = tx.commit_transaction()
    except CommitFailedException:
        return RewriteResult()
    return RewriteResult(len(due), len(removed), len(added), committed.current_snapshot().snapshot_id)
