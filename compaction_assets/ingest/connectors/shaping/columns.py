"""A unit's records as Arrow columns (keys and values already stored bytes), and how units' columns are put
together.

Every unit becomes Columns: column by column through `keyed`, the one constructor of the column-wise shapes
(parquet_columns.py, json_columns.py, csv_columns.py), or through the per-row shapes (from_raw).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.ingest.formats import arrowschema, base64_columns, canonical
from compaction_assets.ingest.formats.arrowjson import NotVectorised, encode_column
from compaction_assets.segments.records import INPUT_SCHEMA

HEADERS_TYPE = INPUT_SCHEMA.field("headers").type
HEADER_TYPE = HEADERS_TYPE.value_type
# a unit's values and headers as a change-event format turns them (debezium_columns.py); None: the rows decide
ValueRule = Callable[[pa.Array, pa.Array], "tuple[pa.Array, pa.Array] | None"]


@dataclass(frozen=True)
class Where:
    """Each row's file and record for errors, built only for the row an error names."""

    labels: list[str]
    source: np.ndarray  # per row: its label
    number: np.ndarray  # per row: its record number after the label, or -1 (the label says it all)
    rows: np.ndarray | None = None  # row i is row rows[i] of source and number: a reordering kept unapplied,
    # since only an error reads a row (a take would copy both arrays for nothing)

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


def keyed(
    key: pa.Array | None,
    value: pa.Array | None,
    offsets: pa.Array,
    timestamps: pa.Array,
    headers: pa.Array,
    row_label: str,
    *,
    mtime_timestamps: int = 0,
    rule: ValueRule | None = None,
    exact: Callable[[pa.Array], bool] | None = None,
    byte_keys: pa.Array | None = None,
    byte_values: pa.Array | None = None,
) -> Columns | None:
    """A unit's records from its key and value columns as the file typed them (the one constructor of every
    column-wise shape); rows `<row_label> 1..n`. `rule` turns change events into values and version headers;
    `exact` says whether a column's canonical JSON is the rows' (JSON: no floats, nulls only absent);
    `byte_keys` / `byte_values` mark the rows whose text is base64 of bytes (Lenses' `keyIsArray`). None:
    the unit is shaped row by row, which takes it as it is or names the record it refuses. A key or value
    the file does not have (None) is null in every row."""
    key = key if key is not None else pa.nulls(len(offsets))
    value = value if value is not None else pa.nulls(len(offsets))
    if rule is not None:
        if _any(byte_values):
            return None  # bytes are no change event: the rows refuse them
        turned = rule(value, headers)
        if turned is None:
            return None
        value, headers = turned
    if exact is not None and not (exact(key) and exact(value)):
        return None
    try:
        keys, _ = _stored(key, byte_keys)
        values, structured = _stored(value, byte_values)
    except NotVectorised:
        return None
    n = len(keys)
    where = Where.numbered(row_label, np.arange(1, n + 1))
    schema = arrowschema.UNKNOWN if _any(byte_values) else arrowschema.value_schema(value)
    return Columns(keys, values, structured, offsets, timestamps, headers, where, mtime_timestamps, schema)


def _any(rows: pa.Array | None) -> bool:
    return rows is not None and bool(pc.any(rows).as_py())


def _stored(arr: pa.Array, base64_rows: pa.Array | None) -> tuple[pa.Array, pa.Array]:
    """A key or value column as stored and whether each row is structured; rows of `base64_rows` decoded."""
    if not _any(base64_rows):
        return encode_column(arr)
    if not (pa.types.is_string(arr.type) or pa.types.is_null(arr.type)):
        raise NotVectorised("base64 of bytes in a column that is not text")  # the rows refuse it
    rows = pc.fill_null(base64_rows, False)
    every = bool(pc.all(rows).as_py())
    decoded = base64_columns.decode(arr if every else pc.filter(arr, rows))
    if decoded is None:
        raise NotVectorised("not base64")
    stored = decoded if every else pc.replace_with_mask(arr.cast(pa.binary()), rows, decoded)
    return stored, pa.array(np.zeros(len(arr), dtype=bool))


def _no_headers(headers: pa.Array) -> bool:
    return len(headers.values) == 0 and not headers.null_count


def take_headers(headers: pa.Array, order: pa.Array) -> pa.Array:
    """`headers.take(order)`; rows without any header (the usual case) as new empty lists, since Arrow's list
    take walks every row's offsets even when every list is empty."""
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


def _empty_headers(n: int) -> pa.Array:
    offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int32).tobytes())
    return pa.Array.from_buffers(HEADERS_TYPE, n, [None, offsets], children=[pa.array([], HEADER_TYPE)])
