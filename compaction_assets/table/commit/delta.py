"""Merge-on-read: a log's change as new data files plus Iceberg v2 position-delete files, in one snapshot.

pyiceberg 0.12 reads position-delete files (its scans apply them, so DuckDB over a scan sees the rows they
leave) but writes none: its upsert, delete and overwrite rewrite every data file holding a touched row
(copy-on-write), and its snapshot producers write data manifests only ("when delete-file write support
lands", says its concurrency validation). A change to 1% of random keys touches every file, so
copy-on-write rewrites the whole table. Here the changed keys' old rows (change.py) are masked by
position-delete files (one per data file, `file_path` + `pos`, as the spec writes them), their new rows are
appended, and one snapshot commits both through a snapshot producer whose manifests are written here, a
`deletes` manifest included (table/iceberg_internals.py, the only module using pyiceberg's private parts).
Files it writes (data, deletes, manifests, manifest list) are pyiceberg's.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Transaction

    from compaction_assets.table.iceberg_internals import ManifestsProducer

DELETE_FILE_PROPERTIES = {"write.metadata.metrics.default": "full"}  # exact path bounds: one referenced file


def _position_delete_schema() -> Schema:
    """The spec's position-delete schema (`pos` a long; pyiceberg's reading schema has an int)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(
        NestedField(2147483546, "file_path", StringType(), required=True),
        NestedField(2147483545, "pos", LongType(), required=True),
    )


def write_position_deletes(io: FileIO, data_file: DataFile, positions: pa.Array) -> DataFile:
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


def row_delta(
    tx: Transaction, properties: dict[str, str], added: list[DataFile], removed: set[str]
) -> ManifestsProducer:
    """A snapshot producer of `tx` adding `added` (data and position-delete files) and removing the files
    at the paths `removed` (either kind); `.commit()` it. Untouched manifests are kept as they are."""
    from pyiceberg.table.snapshots import Operation

    from compaction_assets.table.iceberg_internals import ManifestsProducer

    def manifests(producer: ManifestsProducer) -> list[ManifestFile]:
        return _new_manifests(producer, tx.table_metadata.spec(), added) + _kept_manifests(producer, removed)

    operation = Operation.OVERWRITE if tx.table_metadata.current_snapshot() else Operation.APPEND
    return ManifestsProducer(tx, operation, properties, added, manifests)


def _new_manifests(producer: ManifestsProducer, spec: PartitionSpec, added: list[DataFile]) -> list[ManifestFile]:
    """A manifest of the added data files and one of the added position-delete files (each when any)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent

    data = [f for f in added if f.content == DataFileContent.DATA]
    deletes = [f for f in added if f.content == DataFileContent.POSITION_DELETES]
    out = [_added_manifest(producer, spec, ManifestContent.DATA, data)] if data else []
    return out + ([_added_manifest(producer, spec, ManifestContent.DELETES, deletes)] if deletes else [])


def _added_manifest(
    producer: ManifestsProducer, spec: PartitionSpec, content: ManifestContent, files: list[DataFile]
) -> ManifestFile:
    """One manifest of `content` listing `files` as added by the producer's snapshot."""
    from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus

    with producer.manifest_writer(spec, content) as writer:
        for f in files:
            writer.add(
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=producer.snapshot_id, data_file=f)
            )
    return writer.to_manifest_file()


def _kept_manifests(producer: ManifestsProducer, removed: set[str]) -> list[ManifestFile]:
    """The parent snapshot's manifests that still list a live file, each without the files at `removed`."""
    parent = producer.parent_snapshot()
    kept = (
        [m for m in parent.manifests(producer.io) if m.has_added_files() or m.has_existing_files()]
        if parent is not None
        else []
    )  # a manifest of removed entries only is dropped a commit later
    return [_without(producer, m, removed) for m in kept] if removed else kept


def _without(producer: ManifestsProducer, manifest: ManifestFile, removed: set[str]) -> ManifestFile:
    """`manifest` as it is when it lists none of the files at `removed`, else rewritten with them deleted."""
    entries = manifest.fetch_manifest_entry(producer.io, discard_deleted=True)
    gone = [e for e in entries if e.data_file.file_path in removed]
    if not gone:
        return manifest
    with producer.manifest_writer(producer.spec(manifest.partition_spec_id), manifest.content) as writer:
        for e in entries:
            (writer.delete if e.data_file.file_path in removed else writer.existing)(e)
    producer.count_removed(e.data_file for e in gone)
    return writer.to_manifest_file()
