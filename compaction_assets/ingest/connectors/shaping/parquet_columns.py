"""Parquet files shaped to a unit's Columns without a Python object per record: Aiven's records, Lenses'
envelopes (keys and values flagged `keyIsArray` / `valueIsArray` decoded from base64) and Confluent's value,
keys and headers files, column by column, change events turned by the connector's rule (debezium_columns.py).

A shape here returns None for anything it does not take exactly as the per-row shapes (shapes.py) do (a
non-integer offset, a header shape of another kind, a count mismatch ...): the caller then shapes the file row
by row, which also gives the per-row one-line errors.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.connectors.shaping.columns import HEADER_TYPE, Columns, ValueRule, _empty_headers, keyed
from compaction_assets.topics.landing_settings import LandingConfig


def whole(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: a file of one row group's chunk as it is (combine_chunks copies even one)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    return whole(table.column(name))


def _struct_of(table: pa.Table, drop: set[str]) -> pa.Array:
    names = [n for n in table.column_names if n not in drop]
    return (
        pa.StructArray.from_arrays([whole(table.column(n)) for n in names], names=names)
        if names
        else pa.array([{}] * table.num_rows, pa.struct([]))
    )


def longs(arr: pa.Array | None, n: int) -> pa.Array | None:
    """An integer column as int64 (absent: nulls); None when it holds anything else."""
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, pa.int64())
    if pa.types.is_integer(arr.type) and not pa.types.is_boolean(arr.type):
        try:
            return arr.cast(pa.int64())
        except pa.ArrowInvalid:
            return None
    return None


def _text_or_bytes(arr: pa.Array) -> bool:
    t = arr.type
    return (
        pa.types.is_null(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def headers_column(arr: pa.Array | None, n: int) -> pa.Array | None:
    """Headers as a map of text to text/bytes, or a list of {key|name, value}; a null one is none; None:
    another shape (shaped row by row)."""
    if arr is None or pa.types.is_null(arr.type):
        return _empty_headers(n)
    if not (pa.types.is_map(arr.type) or (pa.types.is_list(arr.type) and pa.types.is_struct(arr.type.value_type))):
        return None
    offs = arr.offsets.to_numpy().astype(np.int64)
    first, last = int(offs[0]), int(offs[-1])
    if arr.null_count and (np.where(arr.is_valid().to_numpy(zero_copy_only=False), 0, offs[1:] - offs[:-1]) != 0).any():
        return None  # a null list spanning child values: left to the per-row shape
    if pa.types.is_map(arr.type):
        names, values = arr.keys.slice(first, last - first), arr.items.slice(first, last - first)
    else:
        items = arr.values.slice(first, last - first)
        fields = {items.type.field(i).name for i in range(items.type.num_fields)}
        name = "key" if "key" in fields else "name"
        if name not in fields or items.null_count:
            return None
        names = items.field(name)
        values = items.field("value") if "value" in fields else pa.nulls(len(items), pa.string())
    if not (pa.types.is_string(names.type) and _text_or_bytes(values)) or names.null_count:
        return None
    pairs = pa.StructArray.from_arrays([names, values.cast(pa.binary())], fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(offs - first, pa.int32()), pairs)


def byte_flags(arr: pa.Array | None, n: int) -> pa.Array | None:
    """A Lenses `keyIsArray` / `valueIsArray` field as a flag per row (absent or null: false); None when it is
    not a boolean (the rows then take any value they deem true)."""
    if arr is None or pa.types.is_null(arr.type):
        return pa.array(np.zeros(n, dtype=bool))
    return pc.fill_null(arr, False) if pa.types.is_boolean(arr.type) else None


def aiven_parquet(table: pa.Table, label: str, rule: ValueRule | None = None) -> Columns | None:
    """Aiven's Parquet records (key, value, offset, timestamp, headers), column by column."""
    n = table.num_rows
    offsets, stamps = longs(_column(table, "offset"), n), longs(_column(table, "timestamp"), n)
    return _keyed_records(table, offsets, stamps, label, rule)


def lenses_parquet(table: pa.Table, label: str, rule: ValueRule | None = None) -> Columns | None:
    """Lenses' Parquet envelopes (key, value, headers, metadata with offset and timestamp), column by column;
    keys or values flagged by `keyIsArray` / `valueIsArray` base64 of bytes."""
    n = table.num_rows
    meta = _column(table, "metadata")
    flags = tuple(byte_flags(_column(table, name), n) for name in ("keyIsArray", "valueIsArray"))
    if meta is None or not pa.types.is_struct(meta.type) or meta.null_count or None in flags:
        return None
    fields = {meta.type.field(i).name for i in range(meta.type.num_fields)}
    offsets, timestamps = (longs(meta.field(name) if name in fields else None, n) for name in ("offset", "timestamp"))
    return _keyed_records(table, offsets, timestamps, label, rule, flags)


def _keyed_records(
    table: pa.Table,
    offsets: pa.Array | None,
    timestamps: pa.Array | None,
    label: str,
    rule: ValueRule | None,
    flags: tuple[pa.Array | None, ...] = (None, None),
) -> Columns | None:
    """Records of one Parquet table with key, value and headers columns, and their offsets and timestamps."""
    n = table.num_rows
    headers = headers_column(_column(table, "headers"), n)
    if offsets is None or timestamps is None or headers is None:
        return None
    key, value = _column(table, "key"), _column(table, "value")
    return keyed(
        key,
        value,
        offsets,
        timestamps,
        headers,
        f"{label}: record",
        rule=rule,
        byte_keys=flags[0],
        byte_values=flags[1],
    )


def confluent_parquet(
    values: pa.Table | None,
    keys: pa.Table,
    headers: pa.Table | None,
    label: str,
    cfg: LandingConfig,
    mtime_ms: int,
    rule: ValueRule | None = None,
) -> Columns | None:
    """Confluent's value, `.keys` and `.headers` Parquet files column by column (values None: tombstones)."""
    n = keys.num_rows
    if any(t is not None and t.num_rows != n for t in (values, headers)):
        return None
    key = whole(keys.column(0)) if keys.column_names == ["key"] else _struct_of(keys, set())
    hdrs = _empty_headers(n)
    if headers is not None:
        hdrs = headers_column(whole(headers.column(0)), n) if headers.column_names == ["headers"] else None
        if hdrs is None:
            return None
    if values is None:
        stamps = pa.nulls(n, pa.int64())
        return keyed(key, None, stamps, pc.fill_null(stamps, mtime_ms), hdrs, f"{label}: record", mtime_timestamps=n)
    fields = [f for f in (cfg.offset_field, cfg.timestamp_field) if f is not None]
    names = values.column_names
    if any(f not in names for f in fields) or len(set(fields)) < len(fields) or len(set(names)) < len(names):
        return None
    offsets = longs(_column(values, cfg.offset_field) if cfg.offset_field else None, n)
    stamps = longs(_column(values, cfg.timestamp_field) if cfg.timestamp_field else None, n)
    if offsets is None or stamps is None:
        return None
    return keyed(
        key,
        _struct_of(values, set(fields)),
        offsets,
        pc.fill_null(stamps, mtime_ms),
        hdrs,
        f"{label}: record",
        mtime_timestamps=stamps.null_count,
        rule=rule,
    )
