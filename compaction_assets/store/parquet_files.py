"""Parquet files read whole, or a folder of them, without `pyarrow.dataset`.

`pq.read_table` goes through `pyarrow.dataset`, whose import pulls in pandas: 0.3 s of a 0.9 s cleaning
after a few new records, though no read here needs it. A file is read with `pq.ParquetFile`; a folder
(a side table's parts, as Spark or the driver wrote them) file by file."""

from __future__ import annotations

from typing import Any


def read_parquet_file(source, columns: list[str] | None = None, schema=None) -> Any:
    """One Parquet file (a path or an open file), or its `columns`, cast to `schema` when given."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(source).read(columns=columns)
    if schema is not None and not table.schema.equals(schema):
        table = table.select(list(schema.names)).cast(schema)
    return table


def read_folder(storage, path: str, columns: list[str] | None, schema) -> Any:
    """The Parquet files of a folder of `storage` (fs.Storage) as one table, in name order, each read as
    `storage.read_parquet` reads a file. Names that start with "." or "_" are a writer's markers and
    checksums, not data. An empty or missing folder goes to pyarrow's dataset reader, which says what it
    says about those."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [n for n in storage.list_dir(path) if not n.startswith((".", "_"))]
    if not names:
        return pq.read_table(path, columns=columns, schema=schema, filesystem=None if storage.local else storage.fs)
    parts = [storage.read_parquet(f"{path}/{n}", columns, schema) for n in names]
    return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
