"""Merge-on-read: a log's change as new data files plus Iceberg v2 position-delete files, in one snapshot.

pyiceberg 0.12 reads position-delete files (its scans apply them, so DuckDB over a scan sees the rows they
leave) but writes none: its upsert, delete and overwrite rewrite every data file holding a touched row
(copy-on-write), and its snapshot producers write data manifests only ("when delete-file write support
lands", says its concurrency validation). A change to 1% of random keys touches every file, so
copy-on-write rewrites the whole table. Here the changed keys' old rows are masked by position-delete
files (one per data file, `file_path` + `pos`, as the spec writes them), their new rows are appended, and
one snapshot commits both through pyiceberg's snapshot producer, whose manifest writer gains the
`deletes` content it lacks. Files it writes (data, deletes, manifests, manifest list) are pyiceberg's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

DELETE_FILE_PROPERTIES = {"write.metadata.metrics.default": "full"}  # exact path bounds: one referenced file


def _position_delete_schema():
    """The spec's position-delete schema (`pos` a long; pyiceberg's reading schema has an int)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(2147483546, "file_path", StringType(), required=True),
        NestedField(2147483545, "pos", LongType(), required=True),
    )


@dataclass(frozen=True)
class LiveRows:
    """A log partition's live rows in the table (deletes applied): key, offset, data file index, position."""

    rows: pa.Table  # key, offset, file, pos
    files: list  # the DataFile of each file index


def plan_by_partition(table, partitions: list[int]) -> dict[int, list]:
    """The file scan tasks (data files with their delete files) of each log partition, in one plan."""
    from pyiceberg.expressions import In

    if table is None or table.current_snapshot() is None:
        return {}
    by_partition: dict[int, list] = {}
    for task in table.scan(row_filter=In("partition", set(partitions))).plan_files():
        spec = table.specs()[task.file.spec_id]
        position = next(i for i, f in enumerate(spec.fields) if f.name == "partition")
        by_partition.setdefault(task.file.partition[position], []).append(task)
    return by_partition


def live_rows(table, tasks: list) -> LiveRows:
    """The live rows of one log partition's file scan tasks with where each lies (data file, position)."""
    from pyiceberg.io.pyarrow import _read_deletes

    io, parts, files = table.io, [], []
    for task in tasks:
        with io.new_input(task.file.file_path).open() as f:
            rows = pq.read_table(f, columns=["key", "offset"])
        positions = pa.array(np.arange(len(rows), dtype=np.int64))
        deleted = [
            d
            for delete in task.delete_files
            for d in [_read_deletes(io, delete).get(task.file.file_path)]
            if d is not None
        ]
        rows = rows.append_column("file", pa.array(np.full(len(rows), len(files), dtype=np.int32)))
        rows = rows.append_column("pos", positions)
        if deleted:
            masked = pa.chunked_array([c.cast(pa.int64()) for d in deleted for c in d.chunks])
            rows = rows.filter(pc.invert(pc.is_in(positions, value_set=masked.combine_chunks())))
        parts.append(rows.select(["key", "offset", "file", "pos"]))
        files.append(task.file)
    empty = pa.table(
        {
            "key": pa.array([], pa.binary()),
            "offset": pa.array([], pa.int64()),
            "file": pa.array([], pa.int32()),
            "pos": pa.array([], pa.int64()),
        }
    )
    return LiveRows(pa.concat_tables([p.cast(empty.schema) for p in parts]) if parts else empty, files)


def write_position_deletes(io, data_file, positions: pa.Array):
    """One Parquet position-delete file masking `positions` of `data_file`, beside it; its DataFile."""
    from pyiceberg.io.fileformat import FileFormatFactory
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

    schema = _position_delete_schema()
    ordered = positions.take(pc.array_sort_indices(positions)).cast(pa.int64())
    rows = pa.Table.from_arrays(
        [pa.array([data_file.file_path] * len(ordered), pa.string()), ordered], schema=schema_to_pyarrow(schema)
    )
    folder = data_file.file_path.rsplit("/", 1)[0]
    output = io.new_output(f"{folder}/{uuid.uuid4()}-deletes.parquet")
    writer = FileFormatFactory.get(FileFormat.PARQUET).create_writer(output, schema, DELETE_FILE_PROPERTIES)
    with writer:
        writer.write(rows)
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=output.location,
        file_format=FileFormat.PARQUET,
        partition=data_file.partition,
        file_size_in_bytes=len(output),
        sort_order_id=None,
        spec_id=data_file.spec_id,
        equality_ids=None,
        key_metadata=None,
        **writer.result().to_serialized_dict(),
    )


def _delete_manifest_writer(producer, spec):
    """pyiceberg's v2 manifest writer with the `deletes` content (its writers write data manifests only)."""
    from pyiceberg.manifest import ManifestContent, ManifestWriterV2

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    return DeleteManifestWriter(
        spec, producer.schema(), producer.new_manifest_output(), producer.snapshot_id, producer._compression
    )


def row_delta(tx, properties: dict[str, str], added: list, removed: set[str]):
    """A snapshot producer of `tx` adding `added` (data and position-delete files) and removing the files
    at the paths `removed` (either kind); `.commit()` it. Untouched manifests are kept as they are."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _SnapshotProducer

    class RowDelta(_SnapshotProducer["RowDelta"]):
        def _validate_concurrency(self) -> None:
            """None: a commit is redone from the new current snapshot when another won the race."""

        def _deleted_entries(self) -> list:
            return []

        def _existing_manifests(self) -> list:
            return []

        def _new_manifest(self, content, files: list):
            spec = self._transaction.table_metadata.spec()
            writer = (
                _delete_manifest_writer(self, spec)
                if content == ManifestContent.DELETES
                else self.new_manifest_writer(spec)
            )
            with writer:
                for f in files:
                    writer.add(
                        ManifestEntry.from_args(
                            status=ManifestEntryStatus.ADDED, snapshot_id=self.snapshot_id, data_file=f
                        )
                    )
            return writer.to_manifest_file()

        def _kept(self, manifest):
            entries = manifest.fetch_manifest_entry(self._io, discard_deleted=True)
            gone = [e for e in entries if e.data_file.file_path in removed]
            if not gone:
                return manifest
            spec = self.spec(manifest.partition_spec_id)
            writer = (
                _delete_manifest_writer(self, spec)
                if manifest.content == ManifestContent.DELETES
                else self.new_manifest_writer(spec)
            )
            with writer:
                for e in entries:
                    (writer.delete if e.data_file.file_path in removed else writer.existing)(e)
            self._deleted_data_files.update(e.data_file for e in gone)
            return writer.to_manifest_file()

        def _manifests(self) -> list:
            data = [f for f in added if f.content == DataFileContent.DATA]
            deletes = [f for f in added if f.content == DataFileContent.POSITION_DELETES]
            out = [self._new_manifest(ManifestContent.DATA, data)] if data else []
            out += [self._new_manifest(ManifestContent.DELETES, deletes)] if deletes else []
            parent = (
                self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
                if self._parent_snapshot_id is not None
                else None
            )
            kept = (
                [m for m in parent.manifests(self._io) if m.has_added_files() or m.has_existing_files()]
                if parent is not None
                else []
            )  # a manifest of removed entries only is dropped a commit later
            return out + ([self._kept(m) for m in kept] if removed else kept)

    producer = RowDelta(
        Operation.OVERWRITE if tx.table_metadata.current_snapshot() else Operation.APPEND,
        tx,
        tx._table.io,
        snapshot_properties=properties,
    )
    producer._added_data_files = list(added)  # the summary counts data and delete files from it
    return producer
