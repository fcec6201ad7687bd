"""A Parquet value column's value schema read off its Arrow type, without parsing its canonical JSON back.

canonical.infer_schema parses the stored JSON objects with Arrow's JSON reader; for the types below the
column's own type (and which of its values are null) says what that reader infers: integers int64,
floats double, booleans bool, text and bytes (base64) text, decimals (their text) text, structs their fields
sorted by name, lists their items' type, anything null everywhere null. Where it cannot say exactly (dates
and timestamps, which the reader turns into timestamps; text that looks like a date, likewise; a uint64 past
int64; maps; an empty struct ...) the answer is UNKNOWN and the caller infers from the JSON as before.
`tests/log/connectors/test_vectorised.py` pins both to the same schema.
"""

from __future__ import annotations

import enum
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.formats.arrowjson import text_bytes
from compaction_assets.ingest.formats.canonical import ValueSchema


class Unknown(enum.Enum):
    """The answer when the Arrow type cannot say the inferred type exactly (its one member, UNKNOWN)."""

    UNKNOWN = "unknown"


UNKNOWN: Final = Unknown.UNKNOWN
DATE_LIKE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}"  # what the JSON reader may read as a timestamp (ISO-8601)
INT64_MAX = 2**63 - 1


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_bytes(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)


def _date_like(arr: pa.Array) -> bool:
    """Whether some value may be read as a timestamp: the regex runs only on values starting with a digit."""
    text = arr.cast(pa.string())
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=len(text) + 1, offset=4 * text.offset)
    starts = offsets[:-1][(offsets[1:] - offsets[:-1]) >= 10] - offsets[0]  # "YYYY-MM-DD" at least
    data = text_bytes(text)
    if not starts.size or not ((data[starts] >= ord("0")) & (data[starts] <= ord("9"))).any():
        return False
    return bool(pc.any(pc.match_substring_regex(text, DATE_LIKE)).as_py())


def _scalar_type(arr: pa.Array) -> pa.DataType | Unknown:
    """The inferred type of a non-nested column holding at least one value."""
    t = arr.type
    if pa.types.is_boolean(t):
        return pa.bool_()
    if pa.types.is_integer(t):
        if pa.types.is_uint64(t) and pc.max(arr).as_py() > INT64_MAX:
            return UNKNOWN
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if _is_text(t):
        return UNKNOWN if _date_like(arr) else pa.string()
    if _is_bytes(t) or pa.types.is_decimal(t):
        return pa.string()  # base64 and decimal text hold no ISO-8601 date
    return UNKNOWN


def _struct_type(arr: pa.StructArray) -> pa.DataType | Unknown:
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if not names or len(set(names)) != len(names):
        return UNKNOWN
    children = dict(zip(names, arr.flatten()))  # parent nulls carried into each field
    fields = []
    for name in sorted(names):
        t = json_type(children[name])
        if t is UNKNOWN:
            return UNKNOWN
        fields.append(pa.field(name, t))
    return pa.struct(fields)


def json_type(arr: pa.Array) -> pa.DataType | Unknown:
    """The type the JSON reader infers for the canonical JSON of `arr`'s values, or UNKNOWN."""
    if arr.null_count == len(arr):
        return pa.null()
    t = arr.type
    if pa.types.is_struct(t):
        return _struct_type(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = json_type(arr.flatten())  # the items of the lists that are not null
        return UNKNOWN if item is UNKNOWN else pa.list_(item)
    return _scalar_type(arr)


def value_schema(values: pa.Array) -> ValueSchema | Unknown | None:
    """A value column's value schema (None: no JSON objects), or UNKNOWN."""
    t = values.type
    if pa.types.is_null(t) or _is_text(t) or _is_bytes(t):
        return None  # stored as they are: not structured
    if not pa.types.is_struct(t):
        return UNKNOWN
    if values.null_count == len(values):
        return None
    inferred = _struct_type(values)
    if inferred is UNKNOWN:
        return UNKNOWN
    return ValueSchema(pa.schema(list(inferred)))
