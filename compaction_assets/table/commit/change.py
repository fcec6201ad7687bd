"""What a commit changes in a log's rows of its topic's table: the keys whose live row is not the latest state's.

The table's live rows of a log partition (its data files' `key` and `offset`, position deletes applied) are
read with where each lies (data file, row position), and joined by key with the log's latest state: a key
whose winning offset differs, is new, or is gone was touched. Its new row is appended and its old row, if
any, masked by a position delete (delta.py), so a commit reads the keys and offsets of the partition's files
and writes about the change's bytes, not the table's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from compaction_assets.table.schema import partitions_filter

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table

LIVE_COLUMNS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("offset", pa.int64()),
        pa.field("file", pa.int32()),
        pa.field("pos", pa.int64()),
    ]
)

KEY_PLACES = pa.schema([LIVE_COLUMNS.field("key"), LIVE_COLUMNS.field("file"), LIVE_COLUMNS.field("pos")])


@dataclass(frozen=True)
class LiveRows:
    """A log partition's live rows in the table (deletes applied): key, offset, data file index, position."""

    rows: pa.Table  # key, offset (unless left out), file, pos
    files: list[DataFile]  # the DataFile of each file index


@dataclass(frozen=True)
class Change:
    """A log partition's change against the table: the old rows to mask, the keys whose rows to append."""

    masks: list[tuple[DataFile, pa.Array]]  # (data file, positions)
    appended: pa.Array  # keys new or updated
    added: int
    deleted: int

    @property
    def masked(self) -> int:
        """The table's old rows this change masks with position deletes: an updated key's and a gone key's."""
        return sum(len(positions) for _, positions in self.masks)


def plan_by_partition(table: Table | None, partitions: list[int]) -> dict[int, list[FileScanTask]]:
    """The file scan tasks (data files with their delete files) of each log partition, in one plan."""
    if table is None or table.current_snapshot() is None:
        return {}
    by_partition: dict[int, list[FileScanTask]] = {}
    for task in table.scan(row_filter=partitions_filter(partitions)).plan_files():
        spec = table.specs()[task.file.spec_id]
        position = next(i for i, f in enumerate(spec.fields) if f.name == "partition")
        by_partition.setdefault(task.file.partition[position], []).append(task)
    return by_partition


def _task_rows(table: Table, task: FileScanTask, index: int, columns: pa.Schema) -> pa.Table:
    """One data file's live rows (its position deletes applied) in `columns`: key, offset when asked for,
    `index` as file, position."""
    from compaction_assets.table.iceberg_internals import read_position_deletes

    with table.io.new_input(task.file.file_path).open() as f:
        # ParquetFile reads the file alone: `pq.read_table` goes through pyarrow.dataset, twice the CPU here
        rows = pq.ParquetFile(f).read(columns=[name for name in ("key", "offset") if name in columns.names])
    positions = pa.array(np.arange(len(rows), dtype=np.int64))
    deleted = [
        d
        for delete in task.delete_files
        for d in [read_position_deletes(table.io, delete).get(task.file.file_path)]
        if d is not None
    ]
    rows = rows.append_column("file", pa.array(np.full(len(rows), index, dtype=np.int32)))
    rows = rows.append_column("pos", positions)
    if deleted:
        masked = pa.chunked_array([c.cast(pa.int64()) for d in deleted for c in d.chunks])
        rows = rows.filter(pc.invert(pc.is_in(positions, value_set=masked.combine_chunks())))
    return rows.select(columns.names)


def live_rows(table: Table, tasks: list[FileScanTask], offsets: bool = True) -> LiveRows:
    """The live rows of one log partition's file scan tasks with where each lies (data file, position), and
    their offsets unless not `offsets` (a tail's change needs none: its every key's row is stale)."""
    columns = LIVE_COLUMNS if offsets else KEY_PLACES
    parts = [_task_rows(table, task, index, columns).cast(columns) for index, task in enumerate(tasks)]
    rows = pa.concat_tables(parts) if parts else columns.empty_table()
    return LiveRows(rows, [task.file for task in tasks])


def _masks(live: LiveRows, stale: pa.Table) -> list[tuple[DataFile, pa.Array]]:
    """The positions of the `stale` rows (sorted by file) grouped by their data file."""
    files = stale.column("file").to_numpy()
    if not len(files):
        return []
    bounds = (np.flatnonzero(np.diff(files)) + 1).tolist()
    return [
        (live.files[int(files[i])], stale.column("pos").slice(i, j - i).combine_chunks())
        for i, j in zip([0, *bounds], [*bounds, len(files)])
    ]


def change_of_tail(table: Table | None, tasks: list[FileScanTask], rows: pa.Table, keys: pa.Array) -> Change:
    """The change of the records a log appended since its table's mark (table/commit/tail.py): `rows` its touched
    keys' new rows, `keys` every touched key; each touched key's live row in the table is stale, since
    every appended record wins over it under the offset strategy."""
    appended = rows.column("key").combine_chunks()
    if table is None or not tasks:
        return Change([], appended, len(rows), 0)
    live = live_rows(table, tasks, offsets=False)
    stale = live.rows.filter(pc.is_in(live.rows.column("key"), value_set=keys)).sort_by("file")
    gone = pc.invert(pc.is_in(stale.column("key"), value_set=appended))
    deleted = pc.sum(gone.cast(pa.int64())).as_py() or 0
    return Change(_masks(live, stale), appended, len(rows), deleted)


def change_of(table: Table | None, tasks: list[FileScanTask], state: pa.Table) -> Change:
    """The keys whose live row in the table (in the partition's file scan `tasks`; none without a table) is
    not the latest state's (by winning offset), new or gone."""
    if table is None or not tasks:
        return Change([], state.column("key").combine_chunks(), len(state), 0)
    live = live_rows(table, tasks)
    mine = pa.table({"key": state.column("key"), "s": state.column("offset")})
    theirs = live.rows.rename_columns(["key", "t", "file", "pos"])
    joined = mine.join(theirs, keys="key", join_type="full outer")
    changed = joined.filter(pc.fill_null(pc.not_equal(joined.column("s"), joined.column("t")), True))
    present = pc.is_valid(changed.column("s"))
    stale = changed.filter(pc.is_valid(changed.column("t"))).sort_by("file")
    added = pc.sum(present.cast(pa.int64())).as_py() or 0
    return Change(
        _masks(live, stale), changed.filter(present).column("key").combine_chunks(), added, len(changed) - added
    )
