"""File formats to rows: Avro (avro.py), Parquet (pyarrow), JSON Lines, a JSON array, CSV; gzip undone.

A file's format by its name is file_formats.py's rule. A file is read whole before anything of it is appended
(all or nothing). Rows are Python objects as the format typed them (records and structs as dicts, bytes as
bytes). Every error is one line naming the file and the record (Avro, Parquet: its number from 1) or line
(JSON Lines, CSV).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.errors import InvalidInputError, first_line
from compaction_assets.ingest.formats.avro import avro_records
from compaction_assets.topics.landing_settings import FileFormat


@dataclass
class Rows:
    """The rows of one file and how to name each in an error."""

    items: list[Any]
    unit: str  # "record" or "line"
    numbers: list[int]

    def where(self, i: int) -> str:
        """`record 3` / `line 7` for row i."""
        return f"{self.unit} {self.numbers[i]}"


def _gunzip(data: bytes, where: str) -> bytes:
    if data[:2] != b"\x1f\x8b":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as exc:
        raise InvalidInputError(f"{where}: corrupt gzip data ({first_line(exc, 200)})") from None


def read_rows(data: bytes, fmt: FileFormat, where: str) -> Rows:
    """The rows of a file's bytes in format `fmt`; `where` names the file in errors."""
    if fmt is FileFormat.AVRO:
        return _avro(data, where)
    if fmt is FileFormat.PARQUET:
        return _parquet(data, where)
    text = _gunzip(data, where)
    if fmt is FileFormat.CSV:
        return _csv(text, where)
    if fmt is FileFormat.JSON:
        return _json_array(text, where)
    return _jsonl(text, where)


def _avro(data: bytes, where: str) -> Rows:
    items = list(avro_records(io.BytesIO(data), where, lambda exc: first_line(exc, 200)))
    return Rows(items, "record", list(range(1, len(items) + 1)))


def read_table(data: bytes, where: str) -> pa.Table:
    """A Parquet file's bytes as an Arrow table; `where` names the file in errors."""
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read()  # read_table goes through pyarrow.dataset: slower
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{where}: not a readable Parquet file ({first_line(exc, 200)})") from None


def _parquet(data: bytes, where: str) -> Rows:
    items = read_table(data, where).to_pylist()
    return Rows(items, "record", list(range(1, len(items) + 1)))


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInputError(f"{where}: not UTF-8") from None


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:
        raise InvalidInputError(f"{where}: JSON nested too deeply") from None


_DECODER = json.JSONDecoder()  # what json.loads uses, without its per-call checks
ASCII_SPACE = " \t\n\r\x0b\x0c"  # what bytes.strip() strips


def _jsonl(data: bytes, where: str) -> Rows:
    try:
        lines = data.decode("utf-8").split("\n")  # one decode for the file; UTF-8 holds no stray \n byte
    except UnicodeDecodeError:
        lines = None
    items, numbers = [], []
    if lines is None:  # some line is not UTF-8: line by line, so that the error names it
        for n, raw in enumerate(data.split(b"\n"), 1):
            if raw.strip():
                items.append(_loads(_decode(raw, f"{where}: line {n}"), f"{where}: line {n}"))
                numbers.append(n)
        return Rows(items, "line", numbers)
    decode = _DECODER.decode
    for n, line in enumerate(lines, 1):
        if line.strip(ASCII_SPACE):
            try:
                items.append(decode(line))
            except (ValueError, RecursionError):
                _loads(line, f"{where}: line {n}")  # raises the one-line error naming the line
                raise
            numbers.append(n)
    return Rows(items, "line", numbers)


def _json_array(data: bytes, where: str) -> Rows:
    doc = _loads(_decode(data, where), where)
    if not isinstance(doc, list):
        raise InvalidInputError(f"{where}: expected a JSON array of records, got {type(doc).__name__}")
    return Rows(doc, "record", list(range(1, len(doc) + 1)))


def _csv(data: bytes, where: str) -> Rows:
    text = _decode(data, where)
    items, numbers = [], []
    try:
        for row in csv.reader(io.StringIO(text, newline="")):
            # a blank line is a record of one empty field (a sink writing only a null value, a tombstone):
            # the csv module yields no cells for it, and skipping it would lose the record
            items.append(row or [""])
    except csv.Error as exc:
        raise InvalidInputError(f"{where}: malformed CSV ({exc})") from None
    numbers = list(range(1, len(items) + 1))
    return Rows(items, "line", numbers)
