"""Reading segment files inside Spark's Python workers, for stores Spark's own filesystems cannot reach.

Spark reads local segment files natively, but an object store needs Hadoop's connector for it (`s3a`,
`gs`, `abfs`), which not every deployment has. These tasks read the files with pyarrow instead, each
worker opening the store from its own environment (the same variables as the driver). This module
imports only pyarrow: it is shipped to executors by value and needs nothing of the project there.
"""

from __future__ import annotations

from typing import Any

BATCH_ROWS = 65_536
# a part of the deletion vector is sorted offsets: delta-encoded, about a byte an entry (snappy alone: 6)
DEAD_PART_OPTIONS = {"compression": "snappy", "use_dictionary": False,
                     "column_encoding": {"offset": "DELTA_BINARY_PACKED"}}


def in_sorted(values, sorted_set):
    """A numpy mask: whether each of `values` (int64) is in `sorted_set` (a numpy array, ascending).

    A binary search per value: Arrow's `is_in` builds a hash set of its value set on every call, so
    filtering many files or batches against one set of offsets rebuilt it each time (a forced cleaning
    of 5M records spent more CPU on that than on reading its files)."""
    import numpy as np

    values = np.asarray(values)
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def open_filesystem(spec: tuple[str, str | None, dict[str, Any]]):
    """The pyarrow filesystem a worker reads with (see `fs.Storage.filesystem_spec`)."""
    import pyarrow.fs as pafs

    kind, bucket, options = spec
    if kind == "local":
        return pafs.LocalFileSystem()
    if kind == "s3":
        return pafs.S3FileSystem(region=options.get("region") or "us-east-1",
                                 endpoint_override=options.get("endpoint_url"),
                                 access_key=options.get("access_key"), secret_key=options.get("secret_key"),
                                 session_token=options.get("session_token"))
    return pafs.FileSystem.from_uri(f"{kind}://{bucket}")[0]


def file_reader(tasks: list[list[tuple[str, int | None]]], fs_spec, schema, min_offset: int):
    """The function for `mapInArrow` over `spark.range(len(tasks))`: task i streams the files of
    tasks[i] ((path, file stamp) each) as SEGMENT_SCHEMA rows, below `min_offset` left out and the
    file stamp applied to tombstones that carry no horizon."""
    def run(batches):
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        fs = open_filesystem(fs_spec)
        horizon_at = schema.get_field_index("delete_horizon")
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for path, stamp in tasks[task]:
                    pf = pq.ParquetFile(fs.open_input_file(path))
                    for rows in pf.iter_batches(batch_size=BATCH_ROWS):
                        table = pa.Table.from_batches([rows]).select(schema.names).cast(schema)
                        table = table.filter(pc.greater_equal(table.column("offset"), min_offset))
                        if not len(table):
                            continue
                        if stamp is not None:
                            horizon = pc.if_else(table.column("is_tombstone"),
                                                 pc.coalesce(table.column("delete_horizon"),
                                                             pa.scalar(stamp, pa.int64())),
                                                 table.column("delete_horizon"))
                            table = table.set_column(horizon_at, schema.field("delete_horizon"), horizon)
                        yield from table.to_batches()
    return run


def file_writer(fs_spec, folder: str, partition_by: str | None):
    """The function for `DataFrame.mapInArrow`: each Spark partition writes its rows as one Parquet file
    under `folder` (one per value of `partition_by` in `folder/<col>=<value>/`, the column left out, as
    Spark's own writer lays it out). Yields (path, rows) of what it wrote."""
    def run(batches):
        import uuid

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        fs = open_filesystem(fs_spec)
        tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
        if not tables:
            return
        table = pa.concat_tables(tables)
        groups = [(folder, table)]
        if partition_by is not None:
            groups = []
            for value in pc.unique(table.column(partition_by)).to_pylist():
                part = table.filter(pc.equal(table.column(partition_by), value)).drop_columns([partition_by])
                groups.append((f"{folder}/{partition_by}={value}", part))
        out = []
        for where, part in groups:
            path = f"{where}/part-{uuid.uuid4().hex}.parquet"
            if kind_is_local(fs_spec):
                import os
                os.makedirs(where, exist_ok=True)
            pq.write_table(part, path, filesystem=fs, compression="snappy")
            out.append((path, len(part)))
        yield pa.RecordBatch.from_pylist([{"path": p, "rows": n} for p, n in out],
                                         schema=pa.schema([("path", pa.string()), ("rows", pa.int64())]))
    return run


def kind_is_local(fs_spec) -> bool:
    """True for the local filesystem's spec."""
    return fs_spec[0] == "local"
