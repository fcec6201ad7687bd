"""The segment rewrite that runs inside Spark's Python workers.

Each task streams the files of one segment through pyarrow, drops the records the decide phase did
not keep and writes one new file, so full records never pass through a Spark shuffle. This module
imports only pyarrow: it is shipped to executors by value and needs nothing of the project there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RewriteSpec:
    seg: int                           # the segment's index in the cleaning's range
    files: tuple[tuple[str, int | None], ...]   # (path, file stamp), in offset order
    offsets_dir: str                   # folder of Parquet files with the `offset` column of rows to keep
    min_offset: int                    # the log start
    horizon: int                       # delete horizon for kept tombstones that carry none
    out: str                           # path of the file to write


def _filesystem(fs_uri: str | None):
    import pyarrow.fs as pafs

    return pafs.FileSystem.from_uri(fs_uri)[0] if fs_uri else pafs.LocalFileSystem()


def _listed_offsets(fs, folder: str):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow.fs import FileSelector, FileType

    infos = fs.get_file_info(FileSelector(folder, allow_not_found=True))
    paths = [i.path for i in infos if i.type == FileType.File and i.base_name.endswith(".parquet")
             and not i.base_name.startswith((".", "_"))]
    if not paths:
        return pa.array([], pa.int64())
    return pa.concat_arrays([pq.read_table(p, filesystem=fs, columns=["offset"]).column("offset").combine_chunks()
                             for p in paths])


def rewrite_one(spec: RewriteSpec, fs, schema, batch_rows: int = 65_536) -> tuple[int, str, int, int]:
    """Rewrite one segment in a Python worker: stream its files and keep only the listed offsets."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    keep = _listed_offsets(fs, spec.offsets_dir)
    written = 0
    with pq.ParquetWriter(spec.out, schema, filesystem=fs, compression="snappy") as writer:
        for path, stamp in spec.files:
            pf = pq.ParquetFile(fs.open_input_file(path))
            for batch in pf.iter_batches(batch_size=batch_rows):
                table = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
                offsets = table.column("offset")
                table = table.filter(pc.and_(pc.is_in(offsets, value_set=keep),
                                             pc.greater_equal(offsets, spec.min_offset)))
                if not len(table):
                    continue
                fill = spec.horizon if stamp is None else stamp
                tomb = pc.is_null(table.column("value"))
                horizon = pc.if_else(tomb, pc.coalesce(table.column("delete_horizon"), pa.scalar(fill, pa.int64())),
                                     table.column("delete_horizon"))
                table = table.set_column(schema.get_field_index("delete_horizon"), schema.field("delete_horizon"),
                                         horizon)
                writer.write_table(table)
                written += len(table)
    size = fs.get_file_info(spec.out).size
    return spec.seg, spec.out, written, int(size or 0)


def partition_runner(tasks: list[list[RewriteSpec]], fs_uri: str | None, schema):
    """The function for `mapInArrow` over `spark.range(len(tasks))`: task i rewrites tasks[i]."""
    def run(batches):
        import pyarrow as pa

        fs = _filesystem(fs_uri)
        for batch in batches:
            for task in batch.column(0).to_pylist():
                rows = [rewrite_one(spec, fs, schema) for spec in tasks[task]]
                yield pa.RecordBatch.from_pylist(
                    [{"seg": s, "path": p, "records": n, "bytes": b} for s, p, n, b in rows],
                    schema=pa.schema([("seg", pa.int32()), ("path", pa.string()), ("records", pa.int64()),
                                      ("bytes", pa.int64())]))
    return run
