"""The one reader of Avro container files (fastavro): the native input files' and the connectors'.

A record is yielded as fastavro decodes it (records as dicts, bytes as bytes), one at a time, so that a
caller checking each record refuses the first bad one before a later corrupt block is reached. A bad header
and a corrupt block are refused in one line naming the file and the record (its number from 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from compaction_assets.errors import InvalidInputError


def avro_records(data: BinaryIO, where: str, reason: Callable[[BaseException], str]) -> Iterator[Any]:
    """Each record of the Avro container file read from `data`; `where` names the file in errors and
    `reason` words fastavro's exception (each caller has its own words for an exception without text)."""
    import fastavro  # only landing areas with Avro files need it

    try:
        reader = fastavro.reader(data)
    except Exception as exc:  # fastavro raises several types for a bad header
        raise InvalidInputError(f"{where}: not a readable Avro file ({reason(exc)})") from None
    n = 0
    while True:
        try:
            record = next(reader)
        except StopIteration:
            return
        except Exception as exc:  # a corrupt block or a truncated file
            raise InvalidInputError(
                f"{where}: record {n + 1}: corrupt Avro data ({type(exc).__name__}: {reason(exc)})"
            ) from None
        n += 1
        yield record
