"""A native landing folder's pending files read one after the other, for landing.py to append each in order
while the next is read in a thread (log/read_ahead.py): reading a file (pyarrow's JSON and Parquet readers,
the Avro records' conversion) and writing the one before (Parquet) spend their time in Arrow code that
releases the GIL, so on two cores they overlap.

A file on an object store is read through a local copy, removed once read; its errors name its URI. A file
refused while read is handed over as Refused, so that the files before it are appended first and the
refusal is raised where the file comes in order.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.input_files import read_input_file


@dataclass
class ReadFile:
    """One landed file read whole: its table, and each row's line (or record) number."""

    landed: Any  # layouts.LandedFile
    path: str  # the path its records were read at (errors name it)
    uri: str  # how errors must name it (the object's URI when read through a local copy)
    table: pa.Table
    lines: list[int] = field(default_factory=list)


@dataclass
class Refused:
    """A landed file refused as it was read."""

    landed: Any
    error: InvalidInputError


def _reworded(exc: InvalidInputError, local: str, uri: str) -> InvalidInputError:
    return InvalidInputError(str(exc).replace(local, uri), row=exc.row)


def read_files(src: Any, files: list[Any]) -> Iterator[ReadFile | Refused]:
    """Each of `files` (LandedFile of the PartitionSource `src`) read whole, in order; stops after a refusal."""
    for landed in files:
        read = read_file(src, landed)
        yield read
        if isinstance(read, Refused):
            return


def read_file(src: Any, landed: Any) -> ReadFile | Refused:
    """One landed file read whole, or its refusal: what an ingestion does with each file, in this process or
    in a Spark task (ingest/spark_units.py)."""
    try:
        if src.storage.local:
            path = src.readable(landed)
            lines: list[int] = []
            return ReadFile(landed, str(path), str(path), read_input_file(path, lines), lines)
        uri = src.storage.uri(landed.path)
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / landed.name
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_bytes(src.storage.read_bytes(landed.path))
            lines = []
            try:
                table = read_input_file(local, lines)
            except InvalidInputError as exc:
                raise _reworded(exc, str(local), uri) from None
        return ReadFile(landed, str(local), uri, table, lines)
    except InvalidInputError as exc:
        return Refused(landed, exc)
