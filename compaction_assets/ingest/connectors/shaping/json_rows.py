"""Connector JSON files parsed by pyarrow's JSON reader into one Arrow array of their values, one a row: a
JSON Lines file a line a row, an Aiven `.json` array a record a row (json_columns.py shapes them).

Lines that are all objects (records, envelopes, values) are read as they are, each a row whose fields are the
columns, taken as one struct (wrapping them first costs a copy and a slower parse); any other file's lines are parsed
wrapped as `{"k": <line>}`, so that a line holding any JSON value (a Confluent keys file's text keys) is one
row of one column. Anything pyarrow refuses (a malformed line, a blank line, a value whose type changes
between lines, a field given twice) or text that is not UTF-8 is None, and the caller reads the file row by
row, which names the line and column. Text pyarrow infers as a timestamp ("2024-01-01") is read
again as the text it is.
"""

from __future__ import annotations

import gzip
import io
import zlib
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.json as pj

from compaction_assets.ingest.formats.jsonl_columns import BLOCK_BYTES

WRAPPED = "k"  # the one field each line is parsed under


@dataclass(frozen=True)
class JsonRows:
    """A JSON file's values, one a row (row i: the i-th from 1), and what errors call a row."""

    values: pa.Array
    unit: str  # "line" (JSON Lines) or "record" (a JSON array)


def gunzipped(data: bytes) -> bytes | None:
    """The bytes, gzip undone; None: corrupt gzip (the per-row reader words the refusal)."""
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error):
        return None  # the per-row reader words the refusal


def _read_wrapped(wrapped: bytes, options: pj.ReadOptions, newlines_in_values: bool = False) -> pa.Array | None:
    """The wrapped values; text pyarrow inferred as timestamps is read again as the text it is."""
    try:
        table = pj.read_json(
            io.BytesIO(wrapped),
            read_options=options,
            parse_options=pj.ParseOptions(newlines_in_values=newlines_in_values),
        )
        if table.column_names == [WRAPPED] and _has_timestamps(table.schema.field(0).type):
            as_text = pa.schema([pa.field(WRAPPED, _timestamps_as_text(table.schema.field(0).type))])
            parse = pj.ParseOptions(explicit_schema=as_text, newlines_in_values=newlines_in_values)
            table = pj.read_json(io.BytesIO(wrapped), read_options=options, parse_options=parse)
        table.validate(full=True)  # pyarrow's parser does not check UTF-8
    except (pa.ArrowException, ValueError, RecursionError):  # RecursionError: a type nested past Python's limit
        return None
    if table.column_names != [WRAPPED]:
        return None
    column = table.column(0)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _has_timestamps(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_list(t):
        return _has_timestamps(t.value_type)
    return pa.types.is_struct(t) and any(_has_timestamps(f.type) for f in t)


def _timestamps_as_text(t: pa.DataType) -> pa.DataType:
    """The type with text where pyarrow inferred a timestamp (from text such as "2024-01-01")."""
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(_timestamps_as_text(t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_timestamps_as_text(f.type)) for f in t])
    return t


def parse_lines(data: bytes) -> JsonRows | None:
    """Each line's JSON value (row i: line i + 1), gzip undone; None: the file is read row by row."""
    text = gunzipped(data)
    if not text:
        return None
    body = text[:-1] if text.endswith(b"\n") else text
    lines = body.count(b"\n") + 1
    values = _read_objects(text) if text[:1] == b"{" else None
    if values is None:
        wrapped = b'{"k":' + body.replace(b"\n", b'}\n{"k":') + b"}\n"
        values = _read_wrapped(wrapped, pj.ReadOptions(block_size=BLOCK_BYTES))
    if values is None or len(values) != lines:
        return None
    return JsonRows(values, "line")


def _read_objects(text: bytes) -> pa.Array | None:
    """Lines that are all JSON objects (the connectors' records and envelopes) read as they are, each a row of
    one struct, as the wrapped read gives them without wrapping them first; None: read them wrapped."""
    try:
        table = pj.read_json(io.BytesIO(text), read_options=pj.ReadOptions(block_size=BLOCK_BYTES))
        if _has_timestamps(pa.struct(list(table.schema))):
            as_text = pa.schema([f.with_type(_timestamps_as_text(f.type)) for f in table.schema])
            parse = pj.ParseOptions(explicit_schema=as_text)
            table = pj.read_json(
                io.BytesIO(text), read_options=pj.ReadOptions(block_size=BLOCK_BYTES), parse_options=parse
            )
        table.validate(full=True)  # pyarrow's parser does not check UTF-8
    except (pa.ArrowException, ValueError, RecursionError):
        return None
    if not table.num_columns:
        return None
    columns = [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in table.columns]
    return pa.StructArray.from_arrays(columns, fields=list(table.schema))


def parse_array(data: bytes) -> JsonRows | None:
    """Each value of a file holding one JSON array (Aiven's `.json`), gzip undone; None: read row by row.
    The array is one row of pyarrow's reader, so one block: its parse is not spread over threads."""
    text = gunzipped(data)
    if text is None or not text.lstrip().startswith(b"["):
        return None
    wrapped = b'{"k":' + text + b"}"
    options = pj.ReadOptions(block_size=len(wrapped) + 64)
    whole = _read_wrapped(wrapped, options, newlines_in_values=True)
    if whole is None or len(whole) != 1 or whole.null_count or not pa.types.is_list(whole.type):
        return None
    return JsonRows(whole.flatten(), "record")
