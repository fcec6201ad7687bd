"""Reading input files (Parquet or JSON Lines with key, value, timestamp, optional headers and offset).

JSON Lines carry keys and values as UTF-8 strings; bytes that are not UTF-8 go in `key_b64` / `value_b64`
(base64) instead. Header values are strings, integers (8-byte big-endian), null, or {"b64": "..."}.
Every error names the file and the line.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InvalidInputError
from .records import coerce_table, records_to_table

FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


def file_format(path: str | Path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InvalidInputError(f"{path}: unsupported file type (expected .parquet, .jsonl, .json or .ndjson)")
    return fmt


def _b64(value: Any, where: str) -> bytes:
    if not isinstance(value, str):
        raise InvalidInputError(f"{where}: base64 value must be a string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInputError(f"{where}: invalid base64") from None


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
            rec[name] = None if raw is None else _b64(raw, f"{where}: {name}_b64")
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
        if val is not None:
            rec[name] = val
    headers = obj.get("headers")
    if headers is not None:
        if isinstance(headers, dict):
            headers = list(headers.items())
        if not isinstance(headers, list):
            raise InvalidInputError(f"{where}: headers must be a list of [name, value] pairs")
        fixed = []
        for h in headers:
            if not (isinstance(h, (list, tuple)) and len(h) == 2):
                raise InvalidInputError(f"{where}: malformed header {h!r} (expected [name, value])")
            name, val = h
            if isinstance(val, dict):
                val = _b64(val.get("b64"), f"{where}: header {name!r}")
            fixed.append([name, val])
        rec["headers"] = fixed
    return rec


def read_jsonl(path: str | Path) -> pa.Table:
    records = []
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                where = f"{path}: line {n}"
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise InvalidInputError(f"{where}: not UTF-8 (use key_b64/value_b64 for raw bytes)") from None
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
                records.append(_json_record(obj, where))
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return records_to_table(records, str(path))


def read_parquet(path: str | Path) -> pa.Table:
    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{path}: not a readable Parquet file ({exc})") from None
    return coerce_table(table, str(path))


def read_input_file(path: str | Path) -> pa.Table:
    """One input file as an INPUT_SCHEMA table; refuses malformed content with file and line/offset."""
    return read_parquet(path) if file_format(path) == "parquet" else read_jsonl(path)
