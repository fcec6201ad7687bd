"""Native JSON Lines read column-wise: pyarrow's JSON reader parses the file into columns, and the keys,
values and headers are shaped with Arrow, not a record at a time (input_files.py's per-record path).

The fast path must give the very table the per-record path gives, or step aside: whenever a file holds
something its columns cannot tell apart from what the per-record path would refuse or read otherwise, the
caller reads the file record by record, which names the file, line and column of any error. It steps aside
for: anything pyarrow refuses (a malformed line, a wrong type, an unknown or repeated field, a number
beyond 64 bits), text that is not UTF-8, blank lines or two objects on one line (a row is then not its
line), `key_b64` / `value_b64` (a null one given beside its text field is refused there), a null key
(absent and null differ there), headers that are not [name, value] pairs of text. A null value is a
tombstone only when its line names `value`, which is asked of those lines alone (they are few).
"""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from compaction_assets.segments.records import HEADER_TYPE, INPUT_SCHEMA

PARSED = pa.schema(
    [
        pa.field("key", pa.string()),
        pa.field("value", pa.string()),
        pa.field("timestamp", pa.int64()),
        pa.field("offset", pa.int64()),
        pa.field("headers", pa.list_(pa.list_(pa.string()))),
    ]
)
BLOCK_BYTES = 16 << 20  # pyarrow's read block: large enough that a block's overhead is noise
_BLANK_OR_INDENTED = re.compile(rb"\n[\n \t\r]")  # a line after a newline that is blank or indented


def read_columns(data: bytes) -> pa.Table | None:
    """The INPUT_SCHEMA table of a native JSON Lines file's bytes, or None when it must be read record by
    record (above)."""
    if not data or b'_b64"' in data:
        return None
    if not _lines_are_rows(data):
        return None
    try:
        parsed = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=BLOCK_BYTES),
            parse_options=pj.ParseOptions(explicit_schema=PARSED, unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, UnicodeDecodeError, ValueError):
        return None
    lines = data.count(b"\n") + (not data.endswith(b"\n"))
    if parsed.num_rows != lines or parsed.column("key").null_count or not _utf8(parsed):
        return None
    headers = pair_headers(parsed.column("headers").combine_chunks())
    if headers is None or not _tombstones_name_their_value(data, parsed.column("value")):
        return None
    return pa.table(
        {
            "offset": parsed.column("offset"),
            "key": parsed.column("key").cast(pa.binary()),
            "value": parsed.column("value").cast(pa.binary()),
            "timestamp": parsed.column("timestamp"),
            "headers": headers,
        },
        schema=INPUT_SCHEMA,
    )


def _utf8(parsed: pa.Table) -> bool:
    """Whether every text of the file is UTF-8 (pyarrow's parser does not check; the per-record path
    refuses the line)."""
    try:
        for name in ("key", "value", "headers"):
            parsed.column(name).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def pair_headers(pairs: pa.Array) -> pa.Array | None:
    """[[name, value], ...] per row as the input's list of {name, value} (none: an empty list); None when a
    pair is not two items or a name is not text."""
    lengths = pc.fill_null(pc.list_value_length(pairs), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(pairs) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = pc.list_flatten(pairs)  # the pairs of the rows with headers, in order (null rows hold none)
    if len(flat) and (flat.null_count or not pc.all(pc.equal(pc.list_value_length(flat), 2)).as_py()):
        return None
    items = pc.list_flatten(flat)
    names, values = items.take(pa.array(np.arange(0, len(items), 2))), items.take(pa.array(np.arange(1, len(items), 2)))
    if names.null_count:
        return None
    entries = pa.StructArray.from_arrays([names, values.cast(pa.binary())], fields=list(HEADER_TYPE))
    return pa.ListArray.from_arrays(pa.array(offsets), entries, type=pa.list_(HEADER_TYPE))


def _lines_are_rows(data: bytes) -> bool:
    """Whether each line begins with `{`: no blank line (pyarrow skips it, so rows would no longer be
    lines) and none beginning with white space (one search of the bytes: no pass of our own)."""
    return data[:1] == b"{" and _BLANK_OR_INDENTED.search(data) is None


def _line_bounds(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Each line's start and end (its newline excluded)."""
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
    if not data.endswith(b"\n"):
        ends = np.append(ends, len(data))
    return np.concatenate([[0], ends[:-1] + 1]), ends


def _tombstones_name_their_value(data: bytes, values: pa.ChunkedArray) -> bool:
    """Whether every line whose value is null names `value` (a tombstone), not leaves it out (refused).

    In a file pyarrow parsed against a flat schema, `"value":` can only be that field's name (inside a
    string its quotes are escaped), and no line names it twice: when the file holds it once a line, every
    line names it. Otherwise (a space before the colon, or a line without it) the null lines are asked."""
    if not values.null_count or data.count(b'"value":') == len(values):
        return True
    starts, ends = _line_bounds(data)
    for row in np.flatnonzero(pc.is_null(values).to_numpy(zero_copy_only=False)).tolist():
        if "value" not in json.loads(data[int(starts[row]) : int(ends[row])]):
            return False
    return True
