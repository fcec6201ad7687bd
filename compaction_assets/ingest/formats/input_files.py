"""Reading input files (Parquet, JSON Lines or Avro with key, value, timestamp, optional headers and offset).

Avro is what Kafka Connect's storage sinks most often write (`<topic>/partition=<p>/<topic>+<p>+<offset>.avro`):
one record per Kafka record, with `key` and `value` as bytes or string (null value = tombstone), `timestamp`
(long, ms), optional `offset` (long) and `headers` (array of {key or name: string, value: bytes, string or
null}). A refused record is named by the file and its record number (from 1).

JSON Lines carry keys and values as UTF-8 strings; bytes that are not UTF-8 go in `key_b64` / `value_b64`
(base64) instead. Header values are strings, integers (8-byte big-endian), null, or {"b64": "..."}.
Every error names the file and the line.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.errors import InvalidInputError, first_line
from compaction_assets.ingest.formats.avro import avro_records
from compaction_assets.ingest.formats.avro_columns import input_table
from compaction_assets.ingest.formats.file_formats import NATIVE_FILES, file_format
from compaction_assets.ingest.formats.jsonl_columns import read_columns
from compaction_assets.segments.headers import HeaderRules, parse_headers
from compaction_assets.segments.records import INT64_MAX, INT64_MIN, coerce_table, decode_base64, records_to_table
from compaction_assets.topics.landing_settings import FileFormat


def _json_header_value(value: Any, name: str, where: str) -> bytes | str | int | None:
    """A JSON Lines header value: text, an integer (8 bytes), null or {"b64": ...} (records_to_table
    encodes the text and the integers)."""
    if isinstance(value, dict):
        return decode_base64(value.get("b64"), f"{where}: header {name!r}")
    if isinstance(value, bool) or not (value is None or isinstance(value, (str, int))):
        raise InvalidInputError(
            f"{where}: header {name!r} value must be a string, an integer "
            f'(8 bytes), null or {{"b64": ...}}, got {type(value).__name__}'
        )
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise InvalidInputError(f"{where}: header {name!r} value {value} does not fit in 8 bytes")
    return value


def _avro_header_value(value: Any, name: str, where: str) -> bytes | str | None:
    """An Avro header value: bytes, text or null (records_to_table encodes the text)."""
    return _avro_bytes(value, where, f"header {name!r} value")


JSON_HEADERS = HeaderRules(
    maps=True,
    sequences=(list,),
    record_names=(),
    pairs=True,
    value=_json_header_value,
    not_a_list="{where}: headers must be a list of [name, value] pairs",
    malformed="{where}: malformed header {header!r} (expected [name, value])",
    name_not_text="{where}: header name {name!r} is not a string",
)
AVRO_HEADERS = HeaderRules(
    maps=False,
    sequences=(list,),
    record_names=("key", "name"),
    pairs=False,
    value=_avro_header_value,
    not_a_list="{where}: headers must be an array of {{key, value}} records",
    malformed="{where}: malformed header {header!r} (expected {{key: string, value: bytes}})",
    name_not_text="{where}: malformed header {header!r} (expected {{key: string, value: bytes}})",
)


def _json_record(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    allowed = {"key", "value", "key_b64", "value_b64", "timestamp", "headers", "offset"}
    unknown = set(obj) - allowed
    if unknown:
        raise InvalidInputError(f"{where}: unknown field(s) {sorted(unknown)}")
    rec: dict[str, Any] = {}
    for name in ("key", "value"):
        if f"{name}_b64" in obj:
            if name in obj:
                raise InvalidInputError(f"{where}: both {name!r} and '{name}_b64' given")
            raw = obj[f"{name}_b64"]
            rec[name] = None if raw is None else decode_base64(raw, f"{where}: {name}_b64")
        elif name in obj:
            val = obj[name]
            if val is not None and not isinstance(val, str):
                raise InvalidInputError(f"{where}: {name} must be a string or null, got {type(val).__name__}")
            rec[name] = val
        elif name == "key":
            raise InvalidInputError(f"{where}: missing required field 'key'")
        else:
            raise InvalidInputError(f"{where}: missing required field 'value' (null for a tombstone)")
    for name in ("timestamp", "offset"):
        val = obj.get(name)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
            raise InvalidInputError(f"{where}: {name} must be an integer, got {val!r}")
        if val is not None and not INT64_MIN <= val <= INT64_MAX:
            raise InvalidInputError(f"{where}: {name} {val} does not fit in a signed 64-bit integer")
        if val is not None:
            rec[name] = val
    if obj.get("headers") is not None:
        rec["headers"] = parse_headers(obj["headers"], where, JSON_HEADERS)
    return rec


def read_jsonl(path: str | Path, lines: list[int] | None = None) -> pa.Table:
    """A JSON Lines file as a table; `lines`, when given, receives the line number of each record. Read
    column-wise (jsonl_columns.py) unless the file needs the per-record path, which names any error."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    table = read_columns(data)
    if table is not None:
        if lines is not None:
            lines.extend(range(1, len(table) + 1))
        return table
    return read_jsonl_records(data, str(path), lines)


def read_jsonl_records(data: bytes, path: str, lines: list[int] | None = None) -> pa.Table:
    """A JSON Lines file's bytes as a table, record by record: every refusal names the file, line and
    column; `lines`, when given, receives the line number of each record."""
    records = []
    with io.BytesIO(data) as fh:
        for n, raw in enumerate(fh, 1):
            where = f"{path}: line {n}"
            if not raw.strip():
                continue
            try:
                # without the line's end: an error at the end of the line is at its true column
                obj = json.loads(raw.rstrip(b"\r\n").decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidInputError(f"{where}: not UTF-8 (use key_b64/value_b64 for raw bytes)") from None
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise InvalidInputError(f"{where}: JSON nested too deeply") from None
            records.append(_json_record(obj, where))
            if lines is not None:
                lines.append(n)
    return records_to_table(records, path)


def read_parquet(path: str | Path) -> pa.Table:
    """Read a landed Parquet file, naming the file in any error."""
    try:  # a file that cannot be opened is said so as for the other formats, not as unreadable Parquet
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{path}: not a readable Parquet file ({exc})") from None
    return coerce_table(table, str(path))


def _avro_bytes(value: Any, where: str, name: str) -> bytes | str | None:
    if value is None or isinstance(value, (bytes, str)):
        return value
    raise InvalidInputError(f"{where}: {name} must be bytes, a string or null, got {type(value).__name__}")


def _avro_record(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected an Avro record, got {type(obj).__name__}")
    unknown = set(obj) - {"key", "value", "timestamp", "headers", "offset"}
    if unknown:
        raise InvalidInputError(f"{where}: unknown field(s) {sorted(unknown)}")
    for name in ("key", "value"):
        if name not in obj:
            raise InvalidInputError(f"{where}: missing required field {name!r}")
    rec: dict[str, Any] = {
        "key": _avro_bytes(obj["key"], where, "key"),
        "value": _avro_bytes(obj["value"], where, "value"),
    }
    for name in ("timestamp", "offset"):
        val = obj.get(name)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
            raise InvalidInputError(f"{where}: {name} must be a long, got {val!r}")
        if val is not None:
            rec[name] = val
    if obj.get("headers") is not None:
        rec["headers"] = parse_headers(obj["headers"], where, AVRO_HEADERS)
    return rec


def read_avro(path: str | Path, numbers: list[int] | None = None) -> pa.Table:
    """An Avro container file as a table, read whole before anything is appended (all or nothing);
    `numbers`, when given, receives each record's number (from 1). Read column-wise (avro_columns.py)
    unless the file needs the per-record path, which names any error's file and record."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    table = input_table(data)
    if table is not None:
        if numbers is not None:
            numbers.extend(range(1, len(table) + 1))
        return table
    return read_avro_records(data, str(path), numbers)


def read_avro_records(data: bytes, path: str, numbers: list[int] | None = None) -> pa.Table:
    """An Avro container file's bytes as a table, record by record: every refusal names the file and the
    record; `numbers`, when given, receives each record's number (from 1)."""
    records = []
    with io.BytesIO(data) as fh:
        for n, obj in enumerate(avro_records(fh, path, lambda exc: first_line(exc, 200, blank="")), 1):
            records.append(_avro_record(obj, f"{path}: record {n}"))
            if numbers is not None:
                numbers.append(n)
    return records_to_table(records, path)


def read_input_file(path: str | Path, lines: list[int] | None = None) -> pa.Table:
    """One input file as an INPUT_SCHEMA table; refuses malformed content with file and line/offset.
    For JSON Lines (Avro), `lines` (when given) receives each record's line (record) number."""
    fmt = file_format(path, NATIVE_FILES)
    if fmt is FileFormat.PARQUET:
        return read_parquet(path)
    return read_avro(path, lines) if fmt is FileFormat.AVRO else read_jsonl(path, lines)
