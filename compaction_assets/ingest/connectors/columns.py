"""A unit's records as Arrow columns (keys and values already stored bytes), and Parquet files shaped to them
without a Python object per record.

Every unit becomes Columns: a Parquet unit directly (aiven_parquet, confluent_parquet, lenses_parquet), any
other through the per-row shapes (from_raw). The vectorised shapes return None for anything they do not take
exactly as the per-row shapes do (a non-integer offset, a header shape of another kind, a count mismatch ...):
the caller then shapes the file row by row, which also gives the per-row one-line errors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors import arrowschema, canonical
from compaction_assets.ingest.connectors.arrowjson import NotVectorised, encode_column
from compaction_assets.ingest.connectors.shapes import RawBatch
from compaction_assets.segments.records import INPUT_SCHEMA
from compaction_assets.topics.landing_settings import LandingConfig

HEADERS_TYPE = INPUT_SCHEMA.field("headers").type
HEADER_TYPE = HEADERS_TYPE.value_type


@dataclass(frozen=True)
class Where:
    """Each row's file and record for errors, built only for the row an error names."""

    labels: list[str]
    source: np.ndarray  # per row: its label
    number: np.ndarray  # per row: its record number after the label, or -1 (the label says it all)
    rows: np.ndarray | None = None  # row i is row rows[i] of source and number: a reordering kept unapplied,
    # since only an error reads a row (5M rows taken twice cost a merge 0.2-0.4 s)

    @classmethod
    def numbered(cls, label: str, numbers) -> Where:
        """Rows `<label> <number>` (e.g. `file: record 3`)."""
        numbers = np.asarray(numbers, dtype=np.int64)
        return cls([label], np.zeros(len(numbers), dtype=np.int64), numbers)

    @classmethod
    def each(cls, labels: list[str]) -> Where:
        """One label per row."""
        return cls(list(labels), np.arange(len(labels), dtype=np.int64), np.full(len(labels), -1, dtype=np.int64))

    def __getitem__(self, i: int) -> str:
        row = i if self.rows is None else int(self.rows[i])
        label, number = self.labels[int(self.source[row])], int(self.number[row])
        return label if number < 0 else f"{label} {number}"

    def take(self, order: np.ndarray) -> Where:
        """The rows in `order`."""
        return replace(self, rows=np.asarray(order) if self.rows is None else self.rows[order])

    def applied(self) -> Where:
        """The same rows with the reordering applied to source and number."""
        if self.rows is None:
            return self
        return Where(self.labels, self.source[self.rows], self.number[self.rows])


def concat_where(parts: list[Where]) -> Where:
    """The rows of several units one after the other."""
    labels: list[str] = []
    sources = []
    parts = [w.applied() for w in parts]
    for w in parts:
        # a unit's rows name one label (a file's records) in most units: repeated, not added row by row
        one = len(w.labels) == 1
        sources.append(np.full(len(w.source), len(labels), dtype=np.int64) if one else w.source + len(labels))
        labels += w.labels
    return Where(labels, np.concatenate(sources), np.concatenate([w.number for w in parts]))


@dataclass(frozen=True)
class Columns:
    """A unit's records: keys and values as stored, and per row whether the value is structured."""

    keys: pa.Array
    values: pa.Array  # a merge's are a pa.ChunkedArray: a chunk per value file, its bytes not copied
    structured: pa.Array
    offsets: pa.Array
    timestamps: pa.Array
    headers: pa.Array
    where: Where
    mtime_timestamps: int = 0  # records whose timestamp is the object's modification time
    # the value schema when the column types said it (None: no JSON objects), else UNKNOWN
    schema: canonical.ValueSchema | arrowschema.Unknown | None = arrowschema.UNKNOWN

    def __len__(self) -> int:
        return len(self.keys)

    def take(self, order: np.ndarray) -> Columns:
        """The rows in `order`."""
        idx = pa.array(order)
        return replace(
            self,
            keys=self.keys.take(idx),
            values=self.values.take(idx),
            structured=self.structured.take(idx),
            offsets=self.offsets.take(idx),
            timestamps=self.timestamps.take(idx),
            headers=take_headers(self.headers, idx),
            where=self.where.take(order),
            schema=arrowschema.UNKNOWN,
        )  # a subset may drop fields

    def table(self) -> pa.Table:
        """As INPUT_SCHEMA."""
        return pa.table(
            {
                "offset": self.offsets,
                "key": self.keys,
                "value": self.values,
                "timestamp": self.timestamps,
                "headers": self.headers,
            },
            schema=INPUT_SCHEMA,
        )


def _no_headers(headers: pa.Array) -> bool:
    return len(headers.values) == 0 and not headers.null_count


def take_headers(headers: pa.Array, order: pa.Array) -> pa.Array:
    """`headers.take(order)`; rows without any header (the usual case) as new empty lists, since Arrow's list
    take costs about 0.25 s a million rows even when every list is empty."""
    return _empty_headers(len(order)) if _no_headers(headers) else headers.take(order)


def _same_schema(parts: list[Columns]) -> canonical.ValueSchema | arrowschema.Unknown | None:
    """The parts' value schema when each is known and those with objects agree, else UNKNOWN."""
    known = [p.schema for p in parts if p.schema is not None]
    said = [s for s in known if isinstance(s, canonical.ValueSchema)]
    if len(said) < len(known) or any(not s.schema.equals(said[0].schema) for s in said):
        return arrowschema.UNKNOWN
    return said[0] if said else None


def value_schema(cols: Columns) -> canonical.ValueSchema | None:
    """The columns' value schema: from their Arrow types when they said it, else inferred from the JSON."""
    if cols.schema is not arrowschema.UNKNOWN:
        return cols.schema
    values = cols.values  # a merge's are chunked (one chunk per value file, not copied into one)
    return canonical.infer_schema(
        values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values, cols.structured
    )


def concat(parts: list[Columns], offsets: pa.Array | None = None, values=None) -> Columns:
    """Several units' rows one after the other; with `offsets` or `values`, those instead of the parts' (a
    merge sets its own, without copying the parts' into one array)."""

    def cat(name: str, typ: pa.DataType) -> pa.Array:
        return pa.concat_arrays([getattr(p, name).cast(typ) for p in parts])

    headers = (
        _empty_headers(sum(len(p) for p in parts))
        if all(_no_headers(p.headers) for p in parts)
        else cat("headers", HEADERS_TYPE)
    )
    offsets = cat("offsets", pa.int64()) if offsets is None else offsets
    values = cat("values", pa.binary()) if values is None else values
    return Columns(
        cat("keys", pa.binary()),
        values,
        cat("structured", pa.bool_()),
        offsets,
        cat("timestamps", pa.int64()),
        headers,
        concat_where([p.where for p in parts]),
        sum(p.mtime_timestamps for p in parts),
        _same_schema(parts),
    )


def from_raw(raw: RawBatch, label: str) -> Columns:
    """Per-row shaped records as columns (keys and values encoded); `label` names the file in errors."""
    keys = [canonical.encode(k, w) for k, w in zip(raw.keys, raw.where)]
    values = [canonical.encode(v, w) for v, w in zip(raw.values, raw.where)]
    headers = (
        _empty_headers(len(raw.headers))
        if not any(raw.headers)
        else pa.array([[{"name": n, "value": v} for n, v in hs] for hs in raw.headers], HEADERS_TYPE)
    )
    try:
        return Columns(
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([canonical.is_structured(v) for v in raw.values], pa.bool_()),
            pa.array(raw.offsets, pa.int64()),
            pa.array(raw.timestamps, pa.int64()),
            headers,
            Where.each(raw.where),
            raw.mtime_timestamps,
        )
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise InvalidInputError(f"{label}: {exc}") from None


# --- Parquet, column by column -------------------------------------------------------------------------------


def _whole(column: pa.ChunkedArray) -> pa.Array:
    """A column as one array: a file of one row group's chunk as it is (combine_chunks copies even one)."""
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _column(table: pa.Table, name: str) -> pa.Array | None:
    if name not in table.column_names:
        return None
    return _whole(table.column(name))


def _struct_of(table: pa.Table, drop: set[str]) -> pa.Array:
    names = [n for n in table.column_names if n not in drop]
    return (
        pa.StructArray.from_arrays([_whole(table.column(n)) for n in names], names=names)
        if names
        else pa.array([{}] * table.num_rows, pa.struct([]))
    )


def _longs(arr: pa.Array | None, n: int) -> pa.Array | None:
    """An integer column as int64 (absent: nulls); None when it holds anything else."""
    if arr is None or pa.types.is_null(arr.type):
        return pa.nulls(n, pa.int64())
    if pa.types.is_integer(arr.type) and not pa.types.is_boolean(arr.type):
        try:
            return arr.cast(pa.int64())
        except pa.ArrowInvalid:
            return None
    return None


def _empty_headers(n: int) -> pa.Array:
    offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(HEADERS_TYPE, n, [None, offsets], children=[pa.array([], HEADER_TYPE)])


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


def aiven_parquet(table: pa.Table, label: str) -> Columns | None:
    """Aiven's Parquet records (key, value, offset, timestamp, headers), column by column."""
    n = table.num_rows
    return _keyed_records(table, _longs(_column(table, "offset"), n), _longs(_column(table, "timestamp"), n), label)


def lenses_parquet(table: pa.Table, label: str) -> Columns | None:
    """Lenses' Parquet envelopes (key, value, headers, metadata with offset and timestamp), column by column;
    byte keys or values flagged by `keyIsArray` / `valueIsArray` are left to the rows."""
    n = table.num_rows
    meta = _column(table, "metadata")
    if (
        meta is None
        or not pa.types.is_struct(meta.type)
        or meta.null_count
        or {"keyIsArray", "valueIsArray"} & set(table.column_names)
    ):
        return None
    fields = {meta.type.field(i).name for i in range(meta.type.num_fields)}
    offsets, timestamps = (_longs(meta.field(name) if name in fields else None, n) for name in ("offset", "timestamp"))
    return _keyed_records(table, offsets, timestamps, label)


def _keyed_records(
    table: pa.Table, offsets: pa.Array | None, timestamps: pa.Array | None, label: str
) -> Columns | None:
    """Records of one Parquet table with key, value and headers columns, and their offsets and timestamps."""
    n = table.num_rows
    try:
        headers = headers_column(_column(table, "headers"), n)
        if offsets is None or timestamps is None or headers is None:
            return None
        key = _column(table, "key")
        value = _column(table, "value")
        keys, _ = encode_column(key if key is not None else pa.nulls(n))
        value = value if value is not None else pa.nulls(n)
        values, structured = encode_column(value)
    except NotVectorised:
        return None
    return Columns(
        keys,
        values,
        structured,
        offsets,
        timestamps,
        headers,
        Where.numbered(f"{label}: record", np.arange(1, n + 1)),
        schema=arrowschema.value_schema(value),
    )


def confluent_parquet(
    values: pa.Table | None, keys: pa.Table, headers: pa.Table | None, label: str, cfg: LandingConfig, mtime_ms: int
) -> Columns | None:
    """Confluent's value, `.keys` and `.headers` Parquet files row by row (values None: tombstones)."""
    n = keys.num_rows
    if any(t is not None and t.num_rows != n for t in (values, headers)):
        return None
    key = _whole(keys.column(0)) if keys.column_names == ["key"] else _struct_of(keys, set())
    try:
        hdrs = _empty_headers(n)
        if headers is not None:
            if headers.column_names != ["headers"]:
                return None
            hdrs = headers_column(_whole(headers.column(0)), n)
            if hdrs is None:
                return None
        stored_keys, _ = encode_column(key)
        if values is None:
            return Columns(
                stored_keys,
                pa.nulls(n, pa.binary()),
                pa.array(np.zeros(n, dtype=bool)),
                pa.nulls(n, pa.int64()),
                pa.array(np.full(n, mtime_ms, dtype=np.int64)),
                hdrs,
                Where.numbered(f"{label}: record", np.arange(1, n + 1)),
                n,
                None,
            )
        fields = [f for f in (cfg.offset_field, cfg.timestamp_field) if f is not None]
        names = values.column_names
        if any(f not in names for f in fields) or len(set(fields)) < len(fields) or len(set(names)) < len(names):
            return None
        offsets = _longs(_column(values, cfg.offset_field) if cfg.offset_field else None, n)
        stamps = _longs(_column(values, cfg.timestamp_field) if cfg.timestamp_field else None, n)
        if offsets is None or stamps is None:
            return None
        value = _struct_of(values, set(fields))
        stored, structured = encode_column(value)
    except NotVectorised:
        return None
    from_mtime = stamps.null_count
    return Columns(
        stored_keys,
        stored,
        structured,
        offsets,
        pc.fill_null(stamps, mtime_ms),
        hdrs,
        Where.numbered(f"{label}: record", np.arange(1, n + 1)),
        from_mtime,
        arrowschema.value_schema(value),
    )
