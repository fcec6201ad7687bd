"""Every use of pyiceberg's private parts, in one place: the rest of table/ calls these and pyiceberg's public API.

pyiceberg 0.12 writes no position deletes, so the merge-on-read commit (commit/delta.py) builds on parts it does
not publish. Each private name used here, and why (tests/table/test_iceberg_internals.py fails on any other
pyiceberg version than the pinned one, and when one of these names is gone):
- `pyiceberg.io.pyarrow._dataframe_to_data_files`: rows written as data files of a table without committing
  them (its public writes commit at once, copy-on-write), so they join the position deletes in one snapshot.
- `pyiceberg.io.pyarrow._read_deletes`: a position-delete file read as {data file: positions} (its scans
  apply deletes but tell no positions, which a commit needs to know which live row each key has).
- `pyiceberg.catalog.Catalog._convert_schema_if_needed`: an Arrow schema as the Iceberg schema `create_table`
  would make of it, which a new table's identifier fields and partition spec refer to.
- `pyiceberg.table.Transaction._table`: a transaction's table, for its FileIO (a transaction publishes none).
- `pyiceberg.table.update.snapshot._SnapshotProducer`: the base of a snapshot whose manifests the caller
  writes (its public producers write data manifests only). Its hooks overridden: `_manifests` (the caller's
  manifests), `_deleted_entries` and `_existing_manifests` (abstract; nothing, as the caller's manifests say
  it all), `_validate_concurrency` (nothing: a commit that lost a race is redone from the new current
  snapshot, never rebased by pyiceberg, which would carry the older marks forward). Its attributes read:
  `_transaction` (the metadata of the parent snapshot), `_io`, `_parent_snapshot_id`, `_compression` (a
  deletes manifest is compressed as its own); written: `_added_data_files` and `_deleted_data_files` (the
  summary counts data and delete files from them).
- `pyiceberg.catalog.MetastoreCatalog._update_and_stage_table`: a commit's requirements checked and its updates
  applied to the current metadata, at the next metadata file's location: what every pyiceberg catalog's
  `commit_table` does first, and table/sqlite_catalog.py's too (it writes the catalog's row itself).
- `pyiceberg.manifest.ManifestWriterV2._meta`: overridden, so that a manifest of position deletes says
  `content: deletes` in its Avro metadata as the spec asks.
Importing this module imports pyiceberg: the modules of table/ import it where they use it, as they do
pyiceberg itself, so that loading the code location does not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
from pyiceberg.catalog import Catalog, MetastoreCatalog
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import _dataframe_to_data_files, _read_deletes
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntry, ManifestFile, ManifestWriter, ManifestWriterV2
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import StagedTable, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Operation, Snapshot
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.typedef import Identifier

# (owner, name) of each private part used above: a module's function or a class's attribute. The test
# checks each still exists on the installed pyiceberg, and that this list names every one the code uses.
PRIVATE_NAMES: tuple[tuple[str, str], ...] = (
    ("pyiceberg.io.pyarrow", "_dataframe_to_data_files"),
    ("pyiceberg.io.pyarrow", "_read_deletes"),
    ("pyiceberg.catalog.Catalog", "_convert_schema_if_needed"),
    ("pyiceberg.table.Transaction", "_table"),
    ("pyiceberg.table.update.snapshot", "_SnapshotProducer"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_manifests"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_deleted_entries"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_existing_manifests"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_validate_concurrency"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_transaction"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_io"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_parent_snapshot_id"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_compression"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_added_data_files"),
    ("pyiceberg.table.update.snapshot._SnapshotProducer", "_deleted_data_files"),
    ("pyiceberg.manifest.ManifestWriterV2", "_meta"),
    ("pyiceberg.catalog.MetastoreCatalog", "_update_and_stage_table"),
)


def stage_table_update(
    catalog: MetastoreCatalog,
    current: Table | None,
    identifier: Identifier,
    requirements: tuple[TableRequirement, ...],
    updates: tuple[TableUpdate, ...],
) -> StagedTable:
    """The table `identifier` of `catalog` after `updates` (its `requirements` checked against `current`, the
    catalog's table now, None for a new one): its metadata and the location to write it at, not written."""
    return catalog._update_and_stage_table(current, identifier, requirements, updates)


def transaction_io(tx: Transaction) -> FileIO:
    """The FileIO of the table of transaction `tx` (a table being created included)."""
    return tx._table.io


def write_data_files(tx: Transaction, rows: pa.Table, io: FileIO) -> list[DataFile]:
    """`rows` written as data files of the table of `tx` (its schema, partition spec and file sizes), not
    committed; none for no rows."""
    return write_data_files_of(tx.table_metadata, rows, io)


def write_data_files_of(metadata: TableMetadata, rows: pa.Table, io: FileIO) -> list[DataFile]:
    """`rows` written as data files of the table of `metadata`, not committed (in Spark's workers too:
    table/commit/spark_tasks.py); none for no rows."""
    return list(_dataframe_to_data_files(table_metadata=metadata, df=rows, io=io)) if len(rows) else []


def read_position_deletes(io: FileIO, delete_file: DataFile) -> dict[str, pa.ChunkedArray]:
    """The positions a position-delete file masks, by the path of the data file they are in."""
    return _read_deletes(io, delete_file)


def iceberg_schema(schema: pa.Schema) -> Schema:
    """The Iceberg schema of Arrow rows of `schema`, as a new table's `create_table` would convert it."""
    return Catalog._convert_schema_if_needed(schema)


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer with the `deletes` content (its writers write data manifests only)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class ManifestsProducer(_SnapshotProducer["ManifestsProducer"]):
    """A snapshot of transaction `tx` whose manifests `build_manifests(producer)` writes, through the public
    methods here and pyiceberg's; `added` (data and delete files) are counted in its summary. `.commit()` it."""

    def __init__(
        self,
        tx: Transaction,
        operation: Operation,
        properties: dict[str, str],
        added: Iterable[DataFile],
        build_manifests: Callable[[ManifestsProducer], list[ManifestFile]],
    ) -> None:
        super().__init__(operation, tx, transaction_io(tx), snapshot_properties=properties)
        self._added_data_files = list(added)
        self.build_manifests = build_manifests

    def _manifests(self) -> list[ManifestFile]:
        return self.build_manifests(self)

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []

    def _existing_manifests(self) -> list[ManifestFile]:
        return []

    def _validate_concurrency(self) -> None:
        """None: a commit is redone from the new current snapshot when another won the race."""

    @property
    def io(self) -> FileIO:
        """The FileIO the snapshot's manifests are read and written with."""
        return self._io

    def parent_snapshot(self) -> Snapshot | None:
        """The snapshot this one follows (None for a table's first)."""
        if self._parent_snapshot_id is None:
            return None
        return self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)

    def manifest_writer(self, spec: PartitionSpec, content: ManifestContent) -> ManifestWriter:
        """A writer of one manifest of this snapshot, of data files or of position-delete files."""
        if content == ManifestContent.DELETES:
            return _DeleteManifestWriter(
                spec, self.schema(), self.new_manifest_output(), self.snapshot_id, self._compression
            )
        return self.new_manifest_writer(spec)

    def count_removed(self, files: Iterable[DataFile]) -> None:
        """Count `files` (data or delete files) as removed by this snapshot in its summary."""
        self._deleted_data_files.update(files)
