"""Aiven's CSV records (`key,value,offset,timestamp`, key and value base64, an empty cell null) read by
pyarrow's CSV reader and shaped column by column, not a Python list per line (readers.py's csv module and
shapes.aiven).

A file is read here only where its lines are exactly the rows Python's csv module gives, a line each: no
quote (the sink quotes nothing: base64 and digits need none), no NUL, no byte-order mark, no carriage
return but before a newline, no cell past the csv module's field size limit, every line as many cells (a
blank line is a record of empty cells to both: pyarrow gives every cell empty, the rows one cell, the
missing ones empty). The cells are then taken as the per-row shape takes them: base64 in its strict form
(base64_columns.py), offsets and timestamps as ASCII digits within 64 bits, a fifth cell onwards ignored.
Anything else (even what the per-row shape would take) is None, and the caller reads the file row by row,
which takes it or names the file, line and column it refuses.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from compaction_assets.ingest.connectors.shaping.columns import Columns, _empty_headers, keyed
from compaction_assets.ingest.connectors.shaping.json_rows import gunzipped
from compaction_assets.ingest.formats import base64_columns
from compaction_assets.ingest.formats.arrowjson import text_bytes
from compaction_assets.ingest.formats.jsonl_columns import BLOCK_BYTES

CELLS = 4  # key, value, offset, timestamp: the cells the per-row shape reads
BOM = b"\xef\xbb\xbf"


def parse_csv(data: bytes) -> pa.Table | None:
    """A CSV file's cells as text, a column each (gzip undone); None: the file is read row by row."""
    text = gunzipped(data)
    if not text or not _one_row_a_line(text):
        return None
    end = text.find(b"\n")
    first = (text if end < 0 else text[:end]).rstrip(b"\r")
    width = first.count(b",") + 1
    try:
        table = pcsv.read_csv(
            io.BytesIO(text),
            read_options=pcsv.ReadOptions(autogenerate_column_names=True, block_size=BLOCK_BYTES),
            # a blank line a row of empty cells, as the rows read it (shapes.aiven: missing cells empty)
            parse_options=pcsv.ParseOptions(
                quote_char=False, double_quote=False, escape_char=False, ignore_empty_lines=False
            ),
            convert_options=pcsv.ConvertOptions(
                column_types={f"f{i}": pa.string() for i in range(width)},
                null_values=[],
                strings_can_be_null=False,
                # the cells read are checked to be ASCII (base64, digits); a cell past them is not read,
                # but the rows decode the whole file: checked only then
                check_utf8=width > CELLS,
            ),
        )
    except (pa.ArrowException, ValueError):
        return None
    if table.num_columns != width:
        return None
    limit = csv.field_size_limit()  # the per-row reader refuses a longer cell
    if any(pc.max(pc.binary_length(c)).as_py() >= limit for c in table.columns):
        return None
    return table.select(list(range(min(width, CELLS)))).combine_chunks()


def _one_row_a_line(text: bytes) -> bool:
    """Whether each line is one row of Python's csv module as it is of pyarrow's (above); a few scans of the
    bytes in C, no pass of our own."""
    if text.startswith(BOM) or b'"' in text or b"\x00" in text:
        return False
    return b"\r" not in text or text.count(b"\r") == text.count(b"\r\n")


def _longs(cell: pa.Array | None, n: int) -> pa.Array | None:
    """Integer cells (an empty one null); None: any other text, or past 64 bits."""
    if cell is None:
        return pa.nulls(n, pa.int64())
    if cell.null_count:
        return None  # parse_csv's cells are never null
    offsets = np.frombuffer(cell.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * cell.offset).astype(np.int64)
    lengths = offsets[1:] - offsets[:-1]
    text = text_bytes(cell)
    # ASCII digits after an optional `-` (int() also takes spaces, `+`, `_` and other scripts' digits, Arrow's
    # cast `0x`): every byte but a digit must be a `-` that starts its cell, so they count the same
    signs = text[offsets[:-1][lengths > 0] - offsets[0]] == ord("-")
    if np.count_nonzero((text - ord("0")) > 9) != np.count_nonzero(signs):
        return None
    if not lengths.all():  # empty cells: null (their slots span no text, so the cast passes over them)
        given = np.concatenate([np.zeros(cell.offset, dtype=bool), lengths > 0])  # bit i: row i - cell.offset
        valid = pa.py_buffer(np.packbits(given, bitorder="little"))
        cell = pa.Array.from_buffers(pa.string(), n, [valid, *cell.buffers()[1:]], offset=cell.offset)
    try:
        return cell.cast(pa.int64())
    except pa.ArrowInvalid:
        return None  # a lone `-`, or past 64 bits


def aiven_csv(table: pa.Table, label: str) -> Columns | None:
    """Aiven's CSV records column by column (no headers)."""
    n = table.num_rows
    cells: list[pa.Array | None] = [table.column(i).chunk(0) if i < table.num_columns else None for i in range(CELLS)]
    key, value = (pa.nulls(n, pa.binary()) if c is None else base64_columns.decode(c, True) for c in cells[:2])
    offsets, timestamps = _longs(cells[2], n), _longs(cells[3], n)
    if key is None or value is None or offsets is None or timestamps is None:
        return None
    return keyed(key, value, offsets, timestamps, _empty_headers(n), f"{label}: line")
