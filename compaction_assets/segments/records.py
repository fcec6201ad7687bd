"""Records: the Arrow schema of segment files, input normalisation and logical sizes (SPEC §1, §4)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import InvalidInputError
from compaction_assets.segments.headers import HeaderRules, decode_headers, parse_headers

HEADER_TYPE = pa.struct([pa.field("name", pa.string(), nullable=False), pa.field("value", pa.binary())])

# What the caller hands to `append` (offset optional, timestamp required unless `now` is given).
INPUT_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.int64()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
    ]
)

# What a segment file holds: records sorted by offset; delete_horizon is set on tombstones kept by a cleaning.
# record_size (SPEC §4) and is_tombstone are derived from the record when it is written, so that the
# cleaning's narrow pass never reads values or headers.
RECORD_COLUMNS = ("offset", "key", "value", "timestamp", "headers", "delete_horizon")
SEGMENT_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("headers", pa.list_(HEADER_TYPE)),
        pa.field("delete_horizon", pa.int64()),
        pa.field("record_size", pa.int64(), nullable=False),
        pa.field("is_tombstone", pa.bool_(), nullable=False),
    ]
)

RECORD_OVERHEAD = 16  # SPEC §4: the fixed part of a record's logical size
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


@dataclass
class Record:
    offset: int
    key: bytes
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes | None]]
    delete_horizon: int | None = None


def decode_base64(value: Any, where: str) -> bytes:
    """Base64 text as bytes; anything else is refused in one line naming `where`."""
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: must be base64 text, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"{where}: invalid base64") from None


def to_bytes(value: Any, what: str) -> bytes | None:
    """A key, value or header value as bytes (str is UTF-8), refusing other types."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate, as JSON's \ud800 escapes give
            raise InvalidInputError(f"{what}: not valid Unicode text ({exc.reason} at character {exc.start})") from None
    raise InvalidInputError(f"{what} must be bytes or a string, got {type(value).__name__}")


def record_size(key: bytes, value: bytes | None, headers: Iterable[tuple[str, bytes | None]]) -> int:
    """Logical size of one record (SPEC §4)."""
    return (
        RECORD_OVERHEAD + len(key) + len(value or b"") + sum(len(n.encode("utf-8")) + len(v or b"") for n, v in headers)
    )


def sizes_array(table: pa.Table) -> pa.Array:
    """Logical size of every row of a table with key, value and headers columns (vectorised SPEC §4)."""
    key_len = pc.binary_length(table.column("key"))
    value_len = pc.fill_null(pc.binary_length(table.column("value")), 0)
    total = pc.add(pc.add(key_len.cast(pa.int64()), value_len.cast(pa.int64())), RECORD_OVERHEAD)
    headers = table.column("headers")
    # Connector layouts store an empty list where a native record has null headers: both add nothing, and
    # a table without a single header (most tables) skips the per-header sums
    if headers.null_count == len(headers) or not pc.sum(pc.list_value_length(headers)).as_py():
        return total
    return pc.add(total, pa.array(np.concatenate([_header_sizes(c) for c in headers.chunks]), pa.int64()))


def _header_sizes(chunk: pa.ListArray) -> np.ndarray:
    """Per row of a headers chunk: the sum of its headers' name and value lengths (null headers: 0)."""
    entries = chunk.values
    per_header = np.asarray(
        pc.add(
            pc.fill_null(pc.binary_length(entries.field("name").cast(pa.binary())), 0).cast(pa.int64()),
            pc.fill_null(pc.binary_length(entries.field("value")), 0).cast(pa.int64()),
        ),
        dtype=np.int64,
    )
    # a row's sum is the running total at its list's end minus the one at its start (the offsets index
    # `values` whether the chunk is a slice or not); a null row may still span entries, so it is zeroed
    running = np.concatenate([np.zeros(1, np.int64), np.cumsum(per_header)])
    bounds = np.asarray(chunk.offsets, dtype=np.int64)
    sums = running[bounds[1:]] - running[bounds[:-1]]
    if chunk.null_count:
        sums[np.asarray(chunk.is_null())] = 0
    return sums


def _input_header_value(value: Any, name: str, where: str) -> bytes | None:
    """A header value of a record handed to `append`: bytes, text, or an integer as its 8 bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        if not INT64_MIN <= value <= INT64_MAX:
            raise InvalidInputError(
                f"{where}: header {name!r} value {value} does not fit in 8 bytes (a signed 64-bit integer)"
            )
        value = value.to_bytes(8, "big", signed=True)
    return to_bytes(value, f"{where}: header {name!r} value")


# the headers of a record handed to `append` (and of the input files, once their readers took them)
INPUT_HEADERS = HeaderRules(
    maps=True,
    sequences=(list, tuple),
    record_names=("name",),
    pairs=True,
    value=_input_header_value,
    not_a_list="{where}: headers must be a list of [name, value] pairs",
    malformed="{where}: malformed header {header!r} (expected [name, value])",
    name_not_text="{where}: header name {name!r} is not a string",
)


def records_to_table(records: Iterable[Mapping[str, Any]], source: str = "input") -> pa.Table:
    """Python dicts (key, value, timestamp, optional headers and offset) to an INPUT_SCHEMA table.

    Keys and values may be bytes or strings (UTF-8 encoded); a header value that is an int means its
    8-byte big-endian encoding. Validation of nulls and offsets happens in `validate_batch`.
    """
    cols: dict[str, list] = {name: [] for name in INPUT_SCHEMA.names}
    for i, rec in enumerate(records):
        where = f"{source}: record {i}"
        if not isinstance(rec, Mapping):
            raise InvalidInputError(f"{where} is not a mapping")
        unknown = set(rec) - set(INPUT_SCHEMA.names)
        if unknown:
            raise InvalidInputError(f"{where}: unknown field(s) {sorted(unknown)}")
        offset = rec.get("offset")
        ts = rec.get("timestamp")
        for name, val in (("offset", offset), ("timestamp", ts)):
            if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
                raise InvalidInputError(f"{where}: {name} {val!r} is not an integer")
            if val is not None and not INT64_MIN <= val <= INT64_MAX:
                raise InvalidInputError(f"{where}: {name} {val} does not fit in a signed 64-bit integer")
        cols["offset"].append(offset)
        cols["key"].append(to_bytes(rec.get("key"), f"{where}: key"))
        cols["value"].append(to_bytes(rec.get("value"), f"{where}: value"))
        cols["timestamp"].append(ts)
        headers = parse_headers(rec.get("headers"), where, INPUT_HEADERS)
        cols["headers"].append([{"name": name, "value": value} for name, value in headers])
    try:
        return pa.table(cols, schema=INPUT_SCHEMA)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise InvalidInputError(f"{source}: {exc}") from None


def coerce_table(data: Any, source: str = "input") -> pa.Table:
    """Accept an Arrow table, a pandas DataFrame or an iterable of dicts; return an INPUT_SCHEMA table."""
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        try:
            import pandas as pd
        except ImportError:  # pragma: no cover - pandas is a dependency
            pd = None
        if pd is not None and isinstance(data, pd.DataFrame):
            return records_to_table(_pandas_rows(data), source)
        return records_to_table(data, source)
    return _conform_arrow(data, source)


def _pandas_rows(frame) -> Iterable[dict[str, Any]]:
    import pandas as pd

    for row in frame.to_dict("records"):
        out: dict[str, Any] = {}
        for k, v in row.items():
            if k in ("offset", "timestamp"):
                out[k] = None if v is None or (isinstance(v, float) and pd.isna(v)) else int(v)
            elif k in ("key", "value"):
                out[k] = None if v is None or (not isinstance(v, (bytes, str)) and pd.isna(v)) else v
            elif k == "headers":
                out[k] = None if v is None or (isinstance(v, float) and pd.isna(v)) else list(v)
            else:
                out[k] = v
        yield out


def _conform_arrow(table: pa.Table, source: str) -> pa.Table:
    missing = [c for c in ("key", "value") if c not in table.column_names]
    if missing:
        raise InvalidInputError(f"{source}: missing required column(s) {missing}")
    unknown = [c for c in table.column_names if c not in INPUT_SCHEMA.names]
    if unknown:
        raise InvalidInputError(f"{source}: unknown column(s) {unknown}")
    columns = []
    for field in INPUT_SCHEMA:
        if field.name in table.column_names:
            col = table.column(field.name)
            if field.name == "timestamp" and pa.types.is_timestamp(col.type):
                col = _epoch_ms(col)  # Spark and most writers store timestamps so: epoch ms (UTC) here
            if not _acceptable(field.name, col.type):
                raise InvalidInputError(f"{source}: column {field.name!r} has type {col.type}, expected {field.type}")
            if field.name in ("key", "value") and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                col = pc.cast(col, pa.binary())
            try:
                col = col.cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidInputError(
                    f"{source}: column {field.name!r} has type {col.type}, expected {field.type} ({exc})"
                ) from None
        else:
            col = pa.nulls(len(table), field.type)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=INPUT_SCHEMA)


def _epoch_ms(col):
    """A timestamp column (any unit, any time zone: Arrow keeps UTC) as int64 milliseconds since the epoch;
    finer units are truncated to the millisecond, as Kafka's record timestamps are."""
    return pc.cast(col, pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())


def _acceptable(name: str, typ: pa.DataType) -> bool:
    """Input column types that convert without changing meaning (no strings-as-numbers, no bools)."""
    if pa.types.is_null(typ):
        return True
    if name in ("offset", "timestamp"):
        return pa.types.is_integer(typ)
    if name in ("key", "value"):
        return (
            pa.types.is_binary(typ)
            or pa.types.is_large_binary(typ)
            or pa.types.is_string(typ)
            or pa.types.is_large_string(typ)
            or pa.types.is_fixed_size_binary(typ)
        )
    return pa.types.is_list(typ) or pa.types.is_large_list(typ)


def rows_to_records(table: pa.Table) -> list[Record]:
    """The rows of a segment table as Record objects."""
    out = []
    for row in table.to_pylist():
        out.append(
            Record(
                row["offset"],
                row["key"],
                row["value"],
                row["timestamp"],
                decode_headers(row.get("headers")),
                row.get("delete_horizon"),
            )
        )
    return out


def with_derived_columns(table: pa.Table) -> pa.Table:
    """The record columns of `table` plus record_size and is_tombstone, as SEGMENT_SCHEMA."""
    table = table.select(list(RECORD_COLUMNS))
    table = table.append_column("record_size", sizes_array(table))
    table = table.append_column("is_tombstone", pc.is_null(table.column("value")))
    return table.cast(SEGMENT_SCHEMA)


def spark_schema():
    """SEGMENT_SCHEMA as a Spark StructType (derived, so the file format is said once)."""
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import ArrayType, StructField, StructType

    def nullable(typ):
        # Nested fields are nullable for Spark: a cast of user data into this schema (spark_append.append_spark)
        # cannot prove a header name non-null; the Arrow write path still refuses null names.
        if isinstance(typ, StructType):
            return StructType([StructField(f.name, nullable(f.dataType), True) for f in typ.fields])
        if isinstance(typ, ArrayType):
            return ArrayType(nullable(typ.elementType), True)
        return typ

    derived = from_arrow_schema(SEGMENT_SCHEMA)
    return StructType([StructField(f.name, nullable(f.dataType), f.nullable) for f in derived.fields])


def spark_record_size():
    """SPEC §4's logical record size as a Spark column (the Arrow twin is `sizes_array`)."""
    from pyspark.sql import functions as F

    hs = F.coalesce(F.col("headers"), F.array())
    headers = F.aggregate(
        hs,
        F.lit(0).cast("long"),
        lambda acc, h: acc + F.octet_length(h["name"]) + F.coalesce(F.length(h["value"]), F.lit(0)),
    )
    base = F.lit(RECORD_OVERHEAD).cast("long") + F.length("key") + F.coalesce(F.length("value"), F.lit(0))
    # the lambda is interpreted, not compiled: skip it for the usual record without headers
    return F.when(F.size(hs) > 0, base + headers).otherwise(base)
