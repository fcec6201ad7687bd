"""Parquet files read and written by Spark's Python workers with pyarrow, for a store Spark itself may not
reach: Spark reads local files natively, but an object store needs Hadoop's connector for it (`s3a`, `gs`,
`abfs`), which not every deployment has. `file_reader` streams a log's segment files into a DataFrame
(`mapInArrow`); `file_writer` writes a DataFrame's partitions as Parquet files (a side table). Each worker
opens the store from the spec the driver sends (`segment_task.open_filesystem`). Like `segment_task`, this
module imports only pyarrow and the segments' worker modules, and is shipped to the workers by value.
"""

from __future__ import annotations

from compaction_assets.segments.arrays import scalar
from compaction_assets.segments.segment_task import BATCH_ROWS, open_filesystem


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
                            horizon = pc.if_else(
                                table.column("is_tombstone"),
                                pc.coalesce(table.column("delete_horizon"), scalar(stamp)),
                                table.column("delete_horizon"),
                            )
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
        yield pa.RecordBatch.from_pylist(
            [{"path": p, "rows": n} for p, n in out], schema=pa.schema([("path", pa.string()), ("rows", pa.int64())])
        )

    return run


def kind_is_local(fs_spec) -> bool:
    """True for the local filesystem's spec."""
    return fs_spec[0] == "local"
