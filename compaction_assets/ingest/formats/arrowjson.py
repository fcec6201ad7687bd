"""Canonical JSON (see canonical.py) of a whole Arrow column at once, byte for byte what the per-row encoder
writes for the same values, so that a Parquet file is shaped without a Python object per record.

Integers, booleans, text, structs (fields sorted by name) and lists are built with Arrow compute; every
other type (floats, bytes, decimals, timestamps, dates, maps ...) is encoded value by value through the
per-row encoder, so its text is the same by construction. A column the per-row encoder would refuse
(NaN, a struct with two fields of one name) raises NotVectorised, and the caller shapes the file row by
row, which names the record in its one-line error.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.formats.canonical import canonical_json


class NotVectorised(Exception):
    """The column is shaped row by row instead (its per-row error names the record)."""


def _python(arr: pa.Array) -> pa.Array:
    """The per-row encoder over one column (the reference for the types built below)."""
    try:
        return pa.array(
            [None if v is None else canonical_json(v).decode("utf-8") for v in arr.to_pylist()], pa.string()
        )
    except (TypeError, ValueError) as exc:
        raise NotVectorised(str(exc)) from None


def text_bytes(text: pa.Array) -> np.ndarray:
    """The UTF-8 bytes of every value of a string array, as one numpy view (no copy)."""
    offsets = np.frombuffer(text.buffers()[1], dtype=np.int32, count=len(text) + 1, offset=4 * text.offset)
    data = text.buffers()[2]
    if data is None:
        return np.empty(0, np.uint8)
    return np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]


def _escaped(arr: pa.Array) -> pa.Array | None:
    """A text column's values escaped for JSON, without their quotes (None: control characters)."""
    text = arr.cast(pa.string())
    raw = text_bytes(text)
    if (raw < 0x20).any():  # control characters: their escapes are left to the encoder
        return None
    for char, escape in (("\\", "\\\\"), ('"', '\\"')):
        if (raw == ord(char)).any():  # most columns hold neither: skip the pass
            text = pc.replace_substring(text, char, escape)
    return text


def _quoted(arr: pa.Array) -> pa.Array:
    if not len(arr):
        return arr.cast(pa.string())
    escaped = _escaped(arr)
    if escaped is None:
        return _python(arr)
    return pc.binary_join_element_wise('"', escaped, '"', "")


def _nulls_under_parent(child: pa.Array, parent: pa.StructArray) -> bool:
    """Whether the child is null only where its struct is (a Parquet struct's children are)."""
    if not child.null_count:
        return True
    if not parent.null_count:
        return False
    return not pc.any(pc.and_(child.is_null(), parent.is_valid())).as_py()


def _field_parts(child: pa.Array, parent: pa.StructArray) -> list:
    """A struct field's JSON as parts to join: a text field quoted by the literals around it (one join for the
    whole struct instead of one more per text field). A child null only where its struct is stays null (the
    join then nulls the struct's row, no `null` text to fill); any other null is the JSON `null`."""
    if not _nulls_under_parent(child, parent):
        return [pc.fill_null(to_json(child), "null")]
    if (pa.types.is_string(child.type) or pa.types.is_large_string(child.type)) and len(child):
        escaped = _escaped(child)
        if escaped is not None:
            return ['"', escaped, '"']
    return [to_json(child)]


def _struct(arr: pa.StructArray) -> pa.Array:
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    if len(set(names)) != len(names):
        raise NotVectorised("a struct with two fields of one name")
    if not names:
        joined = pa.array(["{}"] * len(arr), pa.string())
    else:
        parts: list = []
        for n, i in enumerate(sorted(range(len(names)), key=lambda i: names[i])):
            prefix = ("{" if n == 0 else ",") + canonical_json(names[i]).decode("utf-8") + ":"
            parts += [prefix, *_field_parts(arr.field(i), arr)]
        joined = pc.binary_join_element_wise(*_merge_literals(parts + ["}"]), "")
    if joined.null_count == arr.null_count:  # its nulls are among the struct's (see _field_parts): the same
        return joined
    return pc.if_else(arr.is_valid(), joined, pa.scalar(None, pa.string()))


def _merge_literals(parts: list) -> list:
    """Adjacent literal parts as one."""
    merged: list = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


def _list(arr: pa.Array) -> pa.Array:
    offsets = arr.offsets
    first, last = offsets[0].as_py(), offsets[-1].as_py()
    children = pc.fill_null(to_json(arr.values.slice(first, last - first)), "null")
    rebased = pc.subtract(offsets, pa.scalar(first, offsets.type))
    build = pa.LargeListArray if pa.types.is_large_list(arr.type) else pa.ListArray
    lists = build.from_arrays(rebased, children, mask=arr.is_null() if arr.null_count else None)
    return pc.binary_join_element_wise("[", pc.binary_join(lists, ","), "]", "")


def to_json(arr: pa.Array) -> pa.Array:
    """The canonical JSON text of each value of `arr` (null where the value is null)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return to_json(arr.dictionary_decode())
    if pa.types.is_null(t):
        return pa.nulls(len(arr), pa.string())
    if pa.types.is_boolean(t):
        return pc.if_else(arr, "true", "false")
    if pa.types.is_integer(t):
        return arr.cast(pa.string())
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _quoted(arr)
    if pa.types.is_struct(t):
        return _struct(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _list(arr)
    return _python(arr)


def encode_column(arr: pa.Array) -> tuple[pa.Array, pa.Array]:
    """A key or value column as stored (binary; text UTF-8, bytes as they are, anything else canonical JSON)
    and, per row, whether it is structured (recorded in the value schema)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        return encode_column(arr.dictionary_decode())
    if (
        pa.types.is_null(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return arr.cast(pa.binary()), pa.array(np.zeros(len(arr), dtype=bool))
    return to_json(arr).cast(pa.binary()), arr.is_valid()
