"""The work a table commit past the in-process bound gives Spark's Python workers (spark_change.py plans it).

Three kinds of task, each a function for `mapInArrow`: the table's live rows of a log partition read a data
file at a time with where each lies (`live_reader`: key, offset, file, position, its position deletes
applied, as change.py's `live_rows` reads them here; for files on an object store, Spark's reader reads local
ones); the new and updated keys' rows written as data files
of the table (`data_writer`); the changed keys' old rows masked, a position-delete file per data file
(`delete_writer`). The writers send back the Iceberg `DataFile`s they wrote, pickled, and their counts: the
driver commits them in one snapshot, holding neither the log's state nor the table's rows.

Like the segments' worker modules, this one is shipped to the workers by value with the modules it calls
(delta.py's delete writer, iceberg_internals.py's data writer, schema.py's row shape); a worker needs
pyarrow, numpy and pyiceberg installed, nothing of the project.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.table.commit.delta import write_position_deletes
from compaction_assets.table.iceberg_internals import write_data_files_of
from compaction_assets.table.schema import HEADER_TYPE, STATE_COLUMNS, shaped_rows

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table.metadata import TableMetadata

LIVE_SCHEMA = "key binary, t long, file int, pos long"  # t: the table's offset of the key
WRITTEN_SCHEMA = "files binary, rows long, gone long"  # pickled DataFiles; rows written or masked; gone keys
WRITTEN_ARROW = pa.schema([("files", pa.binary()), ("rows", pa.int64()), ("gone", pa.int64())])


def live_reader(files: list[tuple[str, list[str]]], io: FileIO):
    """The function for `mapInArrow` over `spark.range(len(files))`: task i yields the live rows of data
    file i ((its path, the paths of the position-delete files that apply to it)): key, offset as `t`, i
    as `file`, the row's position as `pos`."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np
        import pyarrow.parquet as pq

        for batch in batches:
            for index in batch.column(0).to_pylist():
                path, delete_paths = files[index]
                with io.new_input(path).open() as f:
                    rows = pq.read_table(f, columns=["key", "offset"])
                positions = pa.array(np.arange(len(rows), dtype=np.int64))
                masked: list[pa.Array] = []
                for delete_path in delete_paths:
                    with io.new_input(delete_path).open() as f:
                        deletes = pq.read_table(f, columns=["file_path", "pos"])
                    mine = deletes.filter(pc.equal(deletes.column("file_path"), path)).column("pos")
                    masked.extend(c.cast(pa.int64()) for c in mine.chunks)
                live = pa.table(
                    {
                        "key": rows.column("key").cast(pa.binary()),
                        "t": rows.column("offset").cast(pa.int64()),
                        "file": pa.array(np.full(len(rows), index, dtype=np.int32)),
                        "pos": positions,
                    }
                )
                if masked:
                    gone = pa.chunked_array(masked, pa.int64()).combine_chunks()
                    live = live.filter(pc.invert(pc.is_in(positions, value_set=gone)))
                yield from live.to_batches()

    return run


def key_bucket(buckets: int):
    """The function of an Arrow UDF: the table's key bucket (Iceberg's `bucket[buckets]` of the key) of each
    key, so that the rows of a bucket reach one writer and make one file, as a commit here writes them."""

    def bucket(keys: pa.Array) -> pa.Array:
        from pyiceberg.transforms import BucketTransform
        from pyiceberg.types import BinaryType

        return BucketTransform(buckets).pyarrow_transform(BinaryType())(keys).cast(pa.int32())

    return bucket


def _written(files: list[DataFile], rows: int, gone: int = 0) -> pa.RecordBatch:
    """A writer's one result row: its DataFiles pickled, the rows written or masked, the keys gone."""
    return pa.RecordBatch.from_pylist([{"files": pickle.dumps(files), "rows": rows, "gone": gone}], WRITTEN_ARROW)


def data_writer(metadata: TableMetadata, io: FileIO, schema: pa.Schema, partition: int):
    """The function for `mapInArrow` over the rows to append (the latest state's columns and value fields):
    each task writes its rows, in the table's shape `schema` with `partition` as log partition, as data files
    of the table of `metadata` (a file per key bucket, as a commit here writes them)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not parts:
            return
        state = headers_from_json(pa.concat_tables(parts))
        rows = shaped_rows(state, STATE_COLUMNS, partition)
        arrays = [
            rows.column(f.name).cast(f.type) if f.name in rows.column_names else pa.nulls(len(rows), f.type)
            for f in schema
        ]
        written = write_data_files_of(metadata, pa.Table.from_arrays(arrays, schema=schema), io)
        yield _written(written, len(state))

    return run


def headers_from_json(state: pa.Table) -> pa.Table:
    """`state` with its `headers` column, sent by the JVM as Spark's `to_json` text of the list (Spark's Arrow
    writer took 60 CPU s for a million rows of even empty header lists: spark_change.py), as the list again:
    null for null, no headers for "[]" (most rows, no parse), else each header's name and its value (base64 in
    the text, absent when null)."""
    import base64
    import json

    text = state.column("headers")
    if not pa.types.is_string(text.type):
        return state

    def header_list(line: str) -> list[dict]:
        return [
            {"name": h["name"], "value": None if h.get("value") is None else base64.b64decode(h["value"])}
            for h in json.loads(line)
        ]

    lines = text.to_pylist()
    headers = [None if line is None else [] if line == "[]" else header_list(line) for line in lines]
    index = state.column_names.index("headers")
    return state.set_column(index, "headers", pa.array(headers, pa.list_(HEADER_TYPE)))


def delete_writer(data_files: list[DataFile], io: FileIO):
    """The function for `mapInArrow` over the old rows to mask (file, pos, gone), grouped by file: each
    task writes a position-delete file per data file it holds (delta.py's, as a commit here writes them)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import numpy as np

        parts = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not parts:
            return
        rows = pa.concat_tables(parts).sort_by("file")
        files = rows.column("file").to_numpy()
        bounds = (np.flatnonzero(np.diff(files)) + 1).tolist()
        written = [
            write_position_deletes(io, data_files[int(files[i])], rows.column("pos").slice(i, j - i).combine_chunks())
            for i, j in zip([0, *bounds], [*bounds, len(files)])
        ]
        gone = pc.sum(rows.column("gone").cast(pa.int64())).as_py() or 0
        yield _written(written, len(rows), gone)

    return run


def written_files(result: pa.Table) -> tuple[list[DataFile], int, int]:
    """The writers' results: every DataFile written, the rows written or masked, the keys gone."""
    files = [f for blob in result.column("files").to_pylist() for f in pickle.loads(blob)]
    rows = pc.sum(result.column("rows")).as_py() or 0
    gone = pc.sum(result.column("gone")).as_py() or 0
    return files, rows, gone
