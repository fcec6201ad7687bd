"""Avro container files read into Arrow columns, so that their records are shaped column by column as
Parquet's are (connectors/shaping/parquet_columns.py; `input_table` below for the native files) instead of checked
and converted a Python object at a time (input_files.py, connectors/shaping/shapes.py).

A file of ARROW_READER_BYTES or more is read straight into Arrow by DataFusion (avro_arrow.py); a smaller
one (or one DataFusion cannot read) is decoded by fastavro, a dict a record, and pyarrow converts the records
at once. Either way the columns take the Arrow type the writer's schema says. That type is said only where
the per-row path's Python value and the Arrow value have the same stored form: null, boolean, int, long,
float, double, string, bytes, enum, fixed, records, arrays, and unions of null with one of these; a map
only as a record's `headers` field (elsewhere the per-row path stores a map as a JSON object, Arrow's as a
list of pairs). Logical types (fastavro turns them into datetimes, decimals, UUIDs), other unions and
recursive types are read row by row, as is any file whose reading fails: the per-row path then names the
first bad record, as it always has.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa

from compaction_assets.ingest.connectors.shaping.parquet_columns import headers_column
from compaction_assets.ingest.formats import avro_arrow
from compaction_assets.segments.records import INPUT_SCHEMA

PRIMITIVES = {
    "null": pa.null(),
    "boolean": pa.bool_(),
    "int": pa.int64(),
    "long": pa.int64(),
    "float": pa.float64(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}
NATIVE_FIELDS = {"key", "value", "timestamp", "headers", "offset"}
ARROW_READER_BYTES = 2 << 20  # a file at least this large is read by avro_arrow.py (its import repays)


def arrow_type(
    schema: Any, named: dict[str, pa.DataType], top: bool = True, header_map: bool = False
) -> pa.DataType | None:
    """The Arrow type of a parsed Avro schema whose values convert to the same stored form, else None;
    `named` gathers the named types met (a later field may name one); `top`: the file's record, whose
    `headers` field may be a map (`header_map`)."""
    if isinstance(schema, str):
        return PRIMITIVES.get(schema, named.get(schema))
    if isinstance(schema, list):
        others = [s for s in schema if s != "null"]
        return arrow_type(others[0], named, top, header_map) if len(others) == 1 and len(schema) == 2 else None
    if not isinstance(schema, dict) or "logicalType" in schema:
        return None
    kind = schema.get("type")
    found: pa.DataType | None = None
    if kind == "record":
        fields = [
            (f["name"], arrow_type(f["type"], named, False, top and f["name"] == "headers")) for f in schema["fields"]
        ]
        found = None if any(t is None for _, t in fields) else pa.struct(fields)
    elif kind == "enum":
        found = pa.string()
    elif kind == "fixed":
        found = pa.binary(schema["size"])
    elif kind in ("array", "map") and (kind == "array" or header_map):
        item = arrow_type(schema["items" if kind == "array" else "values"], named, False)
        found = None if item is None else pa.list_(item) if kind == "array" else pa.map_(pa.string(), item)
    elif isinstance(kind, str) and kind in PRIMITIVES:  # with properties of its own (Connect's connect.type)
        found = PRIMITIVES[kind]
    if found is not None and kind in ("record", "enum", "fixed"):
        named[schema["name"]] = found
    return found


def read_records(data: bytes) -> pa.Array | None:
    """Every record of an Avro container file's bytes as one Arrow array; None: read it row by row."""
    import fastavro  # only landing areas with Avro files need it

    try:
        reader = fastavro.reader(io.BytesIO(data))
        typ = arrow_type(reader.writer_schema, {})
        if typ is None:
            return None
        records = None
        if len(data) >= ARROW_READER_BYTES and _a_record(reader.writer_schema) and pa.types.is_struct(typ):
            records = avro_arrow.read_records(data, typ)
        if records is None:
            records = pa.array(list(reader), type=typ)
    except Exception:  # fastavro raises several types for a bad header or block, pyarrow for a value that
        return None  # does not convert: the per-row path names the record and words the reason
    return records if no_repeated_names(records) else None


def _a_record(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "record"


def no_repeated_names(records: pa.Array) -> bool:
    """Whether no `headers` map repeats a name in a record (a dict keeps the last, Arrow's map both)."""
    index = records.type.get_field_index("headers") if pa.types.is_struct(records.type) else -1
    if index < 0 or not pa.types.is_map(records.type.field(index).type):
        return True
    maps = records.field(index)
    offsets = maps.offsets.to_numpy()
    first, last = int(offsets[0]), int(offsets[-1])
    if first == last:
        return True
    rows = np.repeat(np.arange(len(maps)), np.diff(offsets))
    names = maps.keys.slice(first, last - first)
    pairs = pa.table({"row": rows, "name": names}).group_by(["row", "name"]).aggregate([])
    return pairs.num_rows == len(names)


def records_table(records: pa.Array | None) -> pa.Table | None:
    """A file of records (structs, none null) as a table of their fields, as a Parquet file reads."""
    if records is None or not pa.types.is_struct(records.type) or records.null_count:
        return None
    return pa.Table.from_struct_array(records)


def column_table(records: pa.Array | None, name: str) -> pa.Table | None:
    """A file of records of any type as a one-column table (a Confluent `.keys` or `.headers` file)."""
    return None if records is None else pa.table({name: records})


def _bytes_or_text(arr: pa.Array) -> bool:
    t = arr.type
    return pa.types.is_null(t) or pa.types.is_string(t) or pa.types.is_binary(t)


def _longs(arr: pa.Array | None, n: int) -> pa.Array | None:
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, pa.int64())
    return arr if pa.types.is_int64(arr.type) else None


def input_table(data: bytes) -> pa.Table | None:
    """A native Avro input file as the INPUT_SCHEMA table input_files.read_avro gives; None: read it
    record by record (a shape it refuses or reads otherwise, or any error, which it names)."""
    table = records_table(read_records(data))
    if table is None or not set(table.column_names) <= NATIVE_FIELDS or not {"key", "value"} <= set(table.column_names):
        return None
    n = table.num_rows
    key, value = (table.column(name).combine_chunks() for name in ("key", "value"))
    field = {name: table.column(name).combine_chunks() for name in table.column_names}
    offsets, stamps = _longs(field.get("offset"), n), _longs(field.get("timestamp"), n)
    headers = field.get("headers")
    if headers is not None and pa.types.is_map(headers.type):
        return None  # refused row by row: native headers are an array of records
    stored_headers = headers_column(headers, n)
    if (
        offsets is None
        or stamps is None
        or stored_headers is None
        or not (_bytes_or_text(key) and _bytes_or_text(value))
    ):
        return None
    return pa.table(
        {
            "offset": offsets,
            "key": key.cast(pa.binary()),
            "value": value.cast(pa.binary()),
            "timestamp": stamps,
            "headers": stored_headers.cast(INPUT_SCHEMA.field("headers").type),
        },
        schema=INPUT_SCHEMA,
    )
