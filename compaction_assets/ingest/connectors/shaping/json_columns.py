"""Connector JSON shaped column by column: Aiven's records (JSON Lines, or its `.json` arrays), Lenses'
envelopes and Confluent's value, keys and headers files, parsed by pyarrow's JSON reader and shaped with Arrow
as the Parquet files are (parquet_columns.py), not a Python object per record (readers.py and shapes.py).

The files' values come from json_rows.py. A shape here gives the very Columns the per-row shapes give, or
None, and the caller shapes the unit row by row, which names the file, line and column of any error. It
steps aside for: numbers that are not 64-bit integers (pyarrow reads 1 as 1.0 in a column of floats, where
the per-row path keeps 1), a field of a key or value that is null in an object (absent and null differ in
canonical JSON, and pyarrow reads both as null), header shapes other than a list of {key|name, value}
records, [name, value] pairs or an empty map. Aiven's ISO-8601 record timestamps go through the per-row
function. Lenses' keys and values flagged `keyIsArray` / `valueIsArray` are decoded from base64, and change
events turned into values and version headers by the connector's rule (debezium_columns.py), in the one
constructor every column-wise shape ends with (columns.keyed).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.shaping.columns import Columns, ValueRule, _empty_headers, keyed
from compaction_assets.ingest.connectors.shaping.json_rows import JsonRows
from compaction_assets.ingest.connectors.shaping.parquet_columns import byte_flags, headers_column, longs
from compaction_assets.ingest.connectors.shaping.shapes import to_ms
from compaction_assets.ingest.formats.jsonl_columns import pair_headers
from compaction_assets.topics.landing_settings import LandingConfig

MAX_DEPTH = 64  # nesting beyond it is read row by row (whose parser refuses a depth past its own limit)


def exact(arr: pa.Array, depth: int = 0) -> bool:
    """Whether the canonical JSON of `arr` (arrowjson.py) is that of the lines' values: only JSON's own types
    (no float, no timestamp), and no field null in an object (absent or null: pyarrow cannot say)."""
    t = arr.type
    if pa.types.is_null(t) or pa.types.is_boolean(t) or pa.types.is_int64(t) or pa.types.is_string(t):
        return True
    if depth > MAX_DEPTH:
        return False
    if pa.types.is_list(t):
        return exact(arr.flatten(), depth + 1)
    if not pa.types.is_struct(t):
        return False
    for i in range(t.num_fields):
        child = arr.field(i)
        if not _nulls_only_under(child, arr) or not exact(child, depth + 1):
            return False
    return True


def _nulls_only_under(child: pa.Array, parent: pa.Array) -> bool:
    if not child.null_count:
        return True
    if not parent.null_count:
        return False
    return not pc.any(pc.and_(child.is_null(), parent.is_valid())).as_py()


def _field(record: pa.Array, name: str) -> pa.Array | None:
    index = record.type.get_field_index(name)
    return None if index < 0 else record.field(index)


def _objects(lines: pa.Array) -> bool:
    """Whether every line is a JSON object (the per-row shapes refuse any other)."""
    return pa.types.is_struct(lines.type) and not lines.null_count


def headers(arr: pa.Array | None, n: int) -> pa.Array | None:
    """A connector's JSON headers (null: none): a list of {key|name, value} records, [name, value] pairs, or
    `{}`; None: another shape (a map's fields come in one order for all lines, not each line's own)."""
    if arr is None or pa.types.is_null(arr.type):
        return _empty_headers(n)
    t = arr.type
    if pa.types.is_struct(t) and t.num_fields == 0:
        return _empty_headers(n)
    if pa.types.is_list(t) and pa.types.is_null(t.value_type):
        return _empty_headers(n) if not len(arr.flatten()) else None
    if pa.types.is_list(t) and t.value_type == pa.list_(pa.string()):
        return pair_headers(arr)
    return headers_column(arr, n)


def _keyed(
    rows: JsonRows,
    offsets: pa.Array | None,
    timestamps: pa.Array | None,
    label: str,
    rule: ValueRule | None,
    byte_flags: tuple[pa.Array | None, pa.Array | None] = (None, None),
) -> Columns | None:
    """Records with key, value and headers fields, and their offsets and timestamps."""
    lines = rows.values
    n = len(lines)
    hdrs = headers(_field(lines, "headers"), n)
    key, value = (_field(lines, name) for name in ("key", "value"))
    if offsets is None or timestamps is None or hdrs is None:
        return None
    return keyed(
        key,
        value,
        offsets,
        timestamps,
        hdrs,
        f"{label}: {rows.unit}",
        rule=rule,
        exact=exact,
        byte_keys=byte_flags[0],
        byte_values=byte_flags[1],
    )


def _timestamps(arr: pa.Array | None, n: int) -> pa.Array | None:
    """Record timestamps: integers, or ISO-8601 text turned into ms by the per-row shapes' own function one
    value at a time (exact by construction); None: anything else, or text it refuses (then named by row)."""
    if arr is None or not pa.types.is_string(arr.type):
        return longs(arr, n)
    try:
        return pa.array([None if v is None else to_ms(v, "") for v in arr.to_pylist()], pa.int64())
    except (InvalidInputError, OverflowError, ValueError, pa.ArrowException):
        return None


def aiven_json(rows: JsonRows, label: str, rule: ValueRule | None = None) -> Columns | None:
    """Aiven's JSON records (key, value, offset, timestamp as an integer or ISO-8601 text, headers)."""
    lines = rows.values
    if not _objects(lines):
        return None
    n = len(lines)
    offsets, stamps = longs(_field(lines, "offset"), n), _timestamps(_field(lines, "timestamp"), n)
    return _keyed(rows, offsets, stamps, label, rule)


def lenses_json(rows: JsonRows, label: str, rule: ValueRule | None = None) -> Columns | None:
    """Lenses' JSON envelopes (key, value, headers, metadata with offset and timestamp), keys and values
    flagged by `keyIsArray` / `valueIsArray` base64 of bytes."""
    lines = rows.values
    if not _objects(lines):
        return None
    n = len(lines)
    key_flags, value_flags = (byte_flags(_field(lines, f), n) for f in ("keyIsArray", "valueIsArray"))
    meta = _field(lines, "metadata")
    if meta is None or not _objects(meta) or key_flags is None or value_flags is None:
        return None
    offsets, stamps = longs(_field(meta, "offset"), n), longs(_field(meta, "timestamp"), n)
    return _keyed(rows, offsets, stamps, label, rule, (key_flags, value_flags))


def _confluent_headers(lines: pa.Array | None, n: int) -> pa.Array | None:
    """A `.headers` file's lines, each its headers or `{headers: [...]}` (a null line: none)."""
    if lines is None:
        return _empty_headers(n)
    if pa.types.is_struct(lines.type) and [f.name for f in lines.type] == ["headers"]:
        return headers(lines.flatten()[0], n)
    return headers(lines, n)


def _taken(values: pa.Array, cfg: LandingConfig) -> tuple[pa.Array, pa.Array, pa.Array] | None:
    """(offsets, timestamps, the values without them) from the InsertField fields configured."""
    n = len(values)
    fields = [f for f in (cfg.offset_field, cfg.timestamp_field) if f is not None]
    if not fields:
        return pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()), values
    if not _objects(values) or len(set(fields)) < len(fields):
        return None
    found = [_field(values, f) for f in fields]
    if any(arr is None or arr.null_count for arr in found):
        return None  # absent is refused, null is none: only the rows tell them apart
    offsets = longs(_field(values, cfg.offset_field) if cfg.offset_field else None, n)
    stamps = longs(_field(values, cfg.timestamp_field) if cfg.timestamp_field else None, n)
    if offsets is None or stamps is None:
        return None
    names = [f.name for f in values.type if f.name not in fields]
    rest = (
        pa.StructArray.from_arrays([_field(values, name) for name in names], names=names)
        if names
        else pa.array([{}] * n, pa.struct([]))
    )
    return offsets, stamps, rest


def confluent_json(
    values: pa.Array | None,
    keys: pa.Array,
    headers_lines: pa.Array | None,
    label: str,
    cfg: LandingConfig,
    mtime_ms: int,
    rule: ValueRule | None = None,
) -> Columns | None:
    """Confluent's value, `.keys` and `.headers` JSON Lines files (values None: a tombstone file)."""
    n = len(keys)
    if any(arr is not None and len(arr) != n for arr in (values, headers_lines)):
        return None
    hdrs = _confluent_headers(headers_lines, n)
    taken = _taken(values, cfg) if values is not None else (pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()), None)
    if hdrs is None or taken is None:
        return None
    offsets, stamps, value = taken
    return keyed(
        keys,
        value,
        offsets,
        pc.fill_null(stamps, mtime_ms),
        hdrs,
        f"{label}: line",
        mtime_timestamps=stamps.null_count,
        rule=rule if value is not None else None,
        exact=exact,
    )
