"""A changes feed of a topic's table: the keys upserted (with their rows) and deleted between two snapshots.

A row of the table is identified by (partition, offset): a log's offsets are unique, so two snapshots hold
the same row of a key exactly when they hold the same (partition, key, offset). With L_from and L_to the
live rows of the two snapshots, the upserts are the rows of L_to not in L_from, and the deletes the keys of
L_from \\ L_to that have no row in L_to. A key updated many times in between shows its row at `to`; one
inserted and deleted in between is nothing, unless it was live at `from` (a delete); one whose row is the
same at both is nothing.

The product commits merge-on-read (commit/delta.py: new rows in new data files, old rows masked by position-delete
files) and rewrites buckets without changing their live rows (commit/rewrite.py), so the two snapshots' file plans
say where the change is, and only that is read:
- `now`: the live rows at `to` of the data files `to` has and `from` had not (a commit's new rows, or a
  rewrite's copies): every row of L_to \\ L_from is there, since a data file both have only loses rows;
- `then`: the identities (partition, key, offset) of the rows live at `from` in the data files `to` no longer
  has (rewritten), and of the rows the delete files added since mask in the data files both have: every
  row of L_from \\ L_to is there, and every row of `now` that was live at `from` (a row cannot be live
  twice, the identifier fields being (partition, key)).
So L_to \\ L_from = now \\ then and L_from \\ L_to = then \\ now, by (partition, offset). A plan this does not
hold for (a delete file gone from a data file both have, or equality deletes: not the product's) is diffed
by scanning both snapshots whole (`scan_changes`), which is exact for any table, and costs the table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction_assets.store.fs import Storage
from compaction_assets.table.catalog import TableError
from compaction_assets.table.reading.read import SnapshotPoint, open_table, snapshot_at

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

IDENTITY = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
    ]
)
ORDER = [("partition", "ascending"), ("key", "ascending")]


@dataclass(frozen=True)
class Changes:
    """What changed in a topic's table from one snapshot to a later one."""

    upserts: pa.Table  # the rows at `to` of the keys new or changed: every column of the table, by partition, key
    deletes: pa.Table  # partition, key: the keys live at `from` and gone at `to`
    from_snapshot_id: int | None  # None: from before the table's first snapshot (every live row an upsert)
    to_snapshot_id: int
    files_read: int  # data files whose rows or identities were read: the cost, about the change's files

    def summary(self) -> str:
        """One line: the counts and the snapshots."""
        return (
            f"{len(self.upserts)} upserts, {len(self.deletes)} deletes from snapshot {self.from_snapshot_id} "
            f"to snapshot {self.to_snapshot_id} ({self.files_read} data files read)"
        )


def changes(
    topic_or_table: str | Table,
    from_: SnapshotPoint | None,
    to: SnapshotPoint | None = None,
    *,
    store: str | Storage | None = None,
) -> Changes:
    """The keys upserted (with their rows at `to`) and deleted in a topic's table from snapshot `from_` to
    snapshot `to` (the current one by default). Each is a snapshot id or a time (milliseconds since the epoch,
    ISO-8601 text or a datetime: the snapshot current then); `from_` None is from an empty table (a first
    run: every live row at `to` is an upsert). A topic's table is found in `store` (a location or
    a Storage; COMPACTION_STORE's by default). One line for an unknown topic, an expired snapshot, a time
    before the oldest kept snapshot, or `from_` after `to`."""
    table = _table(topic_or_table, store)
    start = snapshot_at(table, from_, "from") if from_ is not None else None
    end = snapshot_at(table, to, "to") if to is not None else table.current_snapshot()
    if end is None:
        raise TableError(f"table {'.'.join(table.name())} has no snapshot")
    if start is not None and (start.sequence_number or 0) > (end.sequence_number or 0):
        raise TableError(
            f"from snapshot {start.snapshot_id} is newer than to snapshot {end.snapshot_id} (a changes feed "
            "goes forward: swap them)"
        )
    return changes_between(table, start.snapshot_id if start is not None else None, end.snapshot_id)


def _table(topic_or_table: str | Table, store: str | Storage | None) -> Table:
    """The table itself, or the topic's table in the store."""
    if not isinstance(topic_or_table, str):
        return topic_or_table
    if store is None:
        from compaction_assets import settings

        store = settings.current().store
    storage = store if isinstance(store, Storage) else Storage.open(store)
    return open_table(storage, topic_or_table)[0]


def changes_between(table: Table, from_id: int | None, to_id: int) -> Changes:
    """The changes from snapshot `from_id` to snapshot `to_id`, reading the files that differ (module doc)."""
    before, after = _plan(table, from_id), _plan(table, to_id)
    if not _merge_on_read(before, after):
        return scan_changes(table, from_id, to_id)
    added = [task for path, task in after.items() if path not in before]
    removed = [task for path, task in before.items() if path not in after]
    masked = [
        (after[path], task)
        for path, task in before.items()
        if path in after and _delete_paths(after[path]) != _delete_paths(task)
    ]
    now = _read(table, to_id, added, full=True)
    then = pa.concat_tables(
        [_read(table, from_id, removed, full=False), *(_newly_masked(table, new, old) for new, old in masked)]
    )
    upserts, deletes = _difference(now, then)
    return Changes(upserts, deletes, from_id, to_id, len(added) + len(removed) + len(masked))


def scan_changes(table: Table, from_id: int | None, to_id: int) -> Changes:
    """The changes from snapshot `from_id` to `to_id` by the live rows of both, whole: exact for any table."""
    before, after = _plan(table, from_id), _plan(table, to_id)
    now = _read(table, to_id, list(after.values()), full=True)
    upserts, deletes = _difference(now, _read(table, from_id, list(before.values()), full=False))
    return Changes(upserts, deletes, from_id, to_id, len(before) + len(after))


def _plan(table: Table, snapshot_id: int | None) -> dict[str, FileScanTask]:
    """The snapshot's data files (each with the delete files that apply to it), by path; none for None."""
    if snapshot_id is None:
        return {}
    return {task.file.file_path: task for task in table.scan(snapshot_id=snapshot_id).plan_files()}


def _delete_paths(task: FileScanTask) -> set[str]:
    return {d.file_path for d in task.delete_files}


def _merge_on_read(before: dict[str, FileScanTask], after: dict[str, FileScanTask]) -> bool:
    """Whether the plans are as the product writes them: position deletes only, and a data file in both
    having at `to` every delete file it had at `from` (its live rows only shrink)."""
    from pyiceberg.manifest import DataFileContent

    tasks = [*before.values(), *after.values()]
    if any(d.content != DataFileContent.POSITION_DELETES for task in tasks for d in task.delete_files):
        return False
    return all(_delete_paths(task) <= _delete_paths(after[path]) for path, task in before.items() if path in after)


def _read(table: Table, snapshot_id: int | None, tasks: list[FileScanTask], full: bool) -> pa.Table:
    """The live rows of `tasks` (their delete files applied) in the snapshot's schema: every column when
    `full`, else the identity columns."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if not tasks and not full:
        return IDENTITY.empty_table()
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    schema_id = snapshot.schema_id if snapshot is not None else None
    schema = table.schemas()[schema_id] if schema_id is not None else table.schema()
    if not full:
        schema = schema.select(*IDENTITY.names)
    rows = ArrowScan(table.metadata, table.io, schema, AlwaysTrue()).to_table(tasks)
    return rows if full else rows.select(IDENTITY.names).cast(IDENTITY)


def _newly_masked(table: Table, new: FileScanTask, old: FileScanTask) -> pa.Table:
    """The identities of the rows of a data file that its delete files at `to` (`new`) mask and those at
    `from` (`old`) did not."""
    path = new.file.file_path
    old_paths = _delete_paths(old)
    fresh = _positions(table, [d for d in new.delete_files if d.file_path not in old_paths], path)
    already = _positions(table, old.delete_files, path)
    return _rows_at(table, path, fresh.filter(pc.invert(pc.is_in(fresh, value_set=already))))


def _positions(table: Table, delete_files: Iterable[DataFile], path: str) -> pa.Array:
    """The positions of the data file at `path` that `delete_files` mask."""
    from compaction_assets.table.iceberg_internals import read_position_deletes

    found = [read_position_deletes(table.io, d).get(path) for d in delete_files]
    chunks = [c.cast(pa.int64()) for positions in found if positions is not None for c in positions.chunks]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.int64())


def _rows_at(table: Table, path: str, positions: pa.Array) -> pa.Table:
    """The identity columns of the data file's rows at `positions`, reading only the row groups holding them."""
    if not len(positions):
        return IDENTITY.empty_table()
    wanted = np.sort(positions.to_numpy())
    with table.io.new_input(path).open() as f:
        parquet = pq.ParquetFile(f)
        sizes = [parquet.metadata.row_group(i).num_rows for i in range(parquet.metadata.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        groups = np.unique(np.searchsorted(starts, wanted, side="right") - 1)
        rows = parquet.read_row_groups(groups.tolist(), columns=IDENTITY.names)
    # a wanted position's place among the rows read: its own group's start there, plus its place in the group
    read_start = dict(zip(groups.tolist(), np.concatenate([[0], np.cumsum(np.asarray(sizes)[groups])]).tolist()))
    group_of = np.searchsorted(starts, wanted, side="right") - 1
    places = wanted - starts[group_of] + np.array([read_start[g] for g in group_of.tolist()], dtype=np.int64)
    return rows.take(pa.array(places)).select(IDENTITY.names).cast(IDENTITY)


def _difference(now: pa.Table, then: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The upserts (rows of `now` whose identity is not in `then`) and the deletes (keys of the identities
    of `then` not in `now`, less the upserted keys), by partition and key."""
    now_ids = pa.table(
        {
            "partition": now.column("partition").cast(pa.int32()),
            "offset": now.column("offset").cast(pa.int64()),
            "row": pa.array(np.arange(len(now), dtype=np.int64)),
        }
    )
    fresh = now_ids.join(then.select(["partition", "offset"]), keys=["partition", "offset"], join_type="left anti")
    upserts = now.take(fresh.column("row")).sort_by(ORDER)
    gone = then.join(now_ids.select(["partition", "offset"]), keys=["partition", "offset"], join_type="left anti")
    keys = upserts.select(["partition", "key"]).cast(pa.schema([IDENTITY.field("partition"), IDENTITY.field("key")]))
    deletes = gone.select(["partition", "key"]).join(keys, keys=["partition", "key"], join_type="left anti")
    return upserts, deletes.sort_by(ORDER)
