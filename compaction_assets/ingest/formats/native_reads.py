"""A native landing folder's pending files read ahead in threads, handed over in order, for landing.py to
append each while the next ones are read: reading a file (pyarrow's JSON and Parquet readers, the Avro
records' conversion) and writing the one before (Parquet) spend their time in Arrow code that releases the
GIL, so on two cores they overlap.

A file on an object store is read through a local copy, removed once read; its errors name its URI. A file
refused while read is handed over as Refused, so that the files before it are appended first and the
refusal is raised where the file comes in order.
"""

from __future__ import annotations

import itertools
import tempfile
from collections import deque
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.input_files import read_input_file

READ_WORKERS = 2  # files read at once: this machine's two cores (more would only hold more files in memory)


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


def read_files(src: Any, files: list[Any], workers: int = READ_WORKERS) -> Generator[ReadFile | Refused, None, None]:
    """Each of `files` (LandedFile of the PartitionSource `src`) read whole, handed over in order; stops after
    a refusal. `workers` files are read at once in threads, ahead of the one the caller appends: a file of
    50,000 records is one block of pyarrow's JSON reader, parsed by one thread, so reading one file at a time
    leaves the second core idle whenever the read is longer than the append (JSON Lines: three times longer).
    Memory holds `workers` files being read and the one being appended. Close the iterator (contextlib.closing)
    when leaving early: the reads not started are cancelled, and those under way are waited for."""
    todo = iter(files)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="read-file") as pool:
        pending = deque(pool.submit(read_file, src, landed) for landed in itertools.islice(todo, workers))
        try:
            while pending:
                read = pending.popleft().result()
                if isinstance(read, Refused):
                    yield read
                    return
                following = next(todo, None)
                if following is not None:  # started before this one is handed over and appended
                    pending.append(pool.submit(read_file, src, following))
                yield read
        finally:
            for future in pending:
                future.cancel()


def read_file(src: Any, landed: Any) -> ReadFile | Refused:
    """One landed file read whole (an object through a local copy), or its refusal: what an ingestion does with
    each file, in this process or in a Spark task (ingest/spark_units.py)."""
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
