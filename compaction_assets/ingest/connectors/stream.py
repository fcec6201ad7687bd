"""A Confluent group of Parquet files streamed: its offsets planned from what is cheap to read, then its records
read, placed and handed to the append one value file at a time.

Tombstone files take the offsets the value files leave free, which chains every file of a partition into one
group; read whole, a group held a whole partition's records at once. The plan reads each value file's row
count (its footer) or its `landing.offset.field` column, and each tombstone file's row count, and gives
every record its offset as `offsets.merge` would. Each piece is then one value file with the tombstones
whose offsets fall before the next value file's first: memory follows a value file, and the records, in the
same order with the same offsets and timestamps, are appended as one batch (`writer.append_pieces`), all or
nothing, under the group's name.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from compaction_assets.errors import InvalidInputError, StorageError
from compaction_assets.ingest.connectors.layouts import PartitionSource, Unit
from compaction_assets.ingest.connectors.offsets import Extent, Part, place, plan_offsets
from compaction_assets.ingest.connectors.shaping.columns import Columns
from compaction_assets.ingest.connectors.shaping.parquet_columns import longs, whole
from compaction_assets.ingest.formats.file_formats import CONNECTOR_FILES, file_format
from compaction_assets.topics.landing_settings import CdcFormat, FileFormat, LandingConfig

LOWEST = -(2**63)
BEYOND = 2**63 - 1


@dataclass
class StreamedGroup:
    """A group's records as pieces in offset order, appended as one batch under `name`."""

    name: str
    files: list[str]
    inferred_offsets: bool
    values: list[Unit]
    tombstones: list[Unit]
    value_offsets: list[np.ndarray]
    tombstone_offsets: list[np.ndarray]
    next_starts: dict[str, int | None]
    source: PartitionSource
    shape: Callable[[Unit], Columns]
    mtime_timestamps: int = 0  # counted as the pieces are read

    def pieces(self) -> Iterator[Columns]:
        """Each value file with the tombstones before the next one's first offset, placed in offset order (a
        tombstone is dated by the record before it, which is in its own piece: only the first piece can open
        with a tombstone)."""
        self.mtime_timestamps = 0
        shaped: dict[int, Columns] = {}  # tombstone files read and not yet wholly placed
        lows = [LOWEST] + [int(o[0]) for o in self.value_offsets[1:]]
        for k, unit in enumerate(self.values):
            low, high = lows[k], lows[k + 1] if k + 1 < len(lows) else BEYOND
            parts = [
                Part(
                    unit,
                    self._read(unit, len(self.value_offsets[k])),
                    self.next_starts.get(unit.name),
                    self.source.uri(unit.main.path),
                )
            ]
            offsets = [self.value_offsets[k]]
            for j, tomb in enumerate(self.tombstones):
                offs = self.tombstone_offsets[j]
                a, b = (int(i) for i in np.searchsorted(offs, [low, high]))
                if a == b:
                    continue
                if j not in shaped:
                    shaped[j] = self._read(tomb, len(offs))
                parts.append(
                    Part(tomb, _rows(shaped[j], a, b), self.next_starts.get(tomb.name), self.source.uri(tomb.main.path))
                )
                offsets.append(offs[a:b])
                if b == len(offs):
                    del shaped[j]
            piece = place(parts, offsets)  # after the first, a piece opens with its value file's first record
            del parts
            self.mtime_timestamps += piece.mtime_timestamps
            yield piece

    def _read(self, unit: Unit, planned: int) -> Columns:
        cols = self.shape(unit)
        if len(cols) != planned:  # the footer read for the plan and the file read now disagree
            raise InvalidInputError(
                f"{self.source.uri(unit.main.path)}: {len(cols)} records where its Parquet "
                f"footer said {planned}; it changed while being ingested"
            )
        return cols


def _rows(cols: Columns, a: int, b: int) -> Columns:
    """Rows a..b of a tombstone file's records (all dated by the object's mtime: tombstones carry no field)."""
    n = b - a
    return replace(
        cols,
        keys=cols.keys.slice(a, n),
        values=cols.values.slice(a, n),
        structured=cols.structured.slice(a, n),
        offsets=cols.offsets.slice(a, n),
        timestamps=cols.timestamps.slice(a, n),
        headers=cols.headers.slice(a, n),
        where=cols.where.take(np.arange(a, b)),
        mtime_timestamps=n if cols.mtime_timestamps else 0,
    )


def _footer_rows(src: PartitionSource, unit: Unit, column: str | None) -> pa.Table | None:
    """The value (or tombstone keys) file read for its row count, or its offset column; None: not readable
    so (the group is then read whole, which names what is wrong)."""
    try:
        return src.storage.read_parquet(unit.main.path, columns=[column] if column else [])
    except FileNotFoundError:
        raise _vanished(src, unit) from None
    except StorageError:  # an object store's error, whatever its cause: read whole, which names it
        if not src.storage.exists(unit.main.path):
            raise _vanished(src, unit) from None
        return None
    except (pa.ArrowException, KeyError, ValueError):
        return None


def _vanished(src: PartitionSource, unit: Unit) -> InvalidInputError:
    return InvalidInputError(f"{src.uri(unit.main.path)}: vanished while being ingested; it lands at the next run")


def _extent(src: PartitionSource, unit: Unit, cfg: LandingConfig, nexts: dict[str, int | None]) -> Extent | None:
    uri = src.uri(unit.main.path)
    field = None if unit.tombstone else cfg.offset_field
    table = _footer_rows(src, unit, field)
    if table is None or (field is not None and field not in table.column_names):
        return None
    explicit = longs(whole(table.column(field)), table.num_rows) if field is not None else None
    if field is not None and explicit is None:
        return None
    return Extent(unit, table.num_rows, explicit, nexts.get(unit.name), uri, _row_namer(uri))


def _row_namer(uri: str) -> Callable[[int], str]:
    """How an error names a row of the file at `uri` (its 1-based record number)."""
    return lambda i: f"{uri}: record {i + 1}"


def plan(
    src: PartitionSource,
    group: list[Unit],
    cfg: LandingConfig,
    nexts: dict[str, int | None],
    shape: Callable[[Unit], Columns],
) -> StreamedGroup | None:
    """The group streamed, or None where it is read whole: one file, change events, files other than Parquet,
    value files whose offsets interleave."""
    if (
        len(group) < 2
        or cfg.cdc is not CdcFormat.NONE
        or any(
            file_format(f.name, CONNECTOR_FILES, cfg.file_format) is not FileFormat.PARQUET
            for u in group
            for f in u.files
        )
    ):
        return None
    values = [u for u in group if not u.tombstone]
    tombs = [u for u in group if u.tombstone]
    found = [_extent(src, u, cfg, nexts) for u in values + tombs]
    extents = [e for e in found if e is not None]
    if not values or len(extents) < len(found):
        return None
    offsets, exact = plan_offsets(extents[: len(values)], extents[len(values) :], cfg.offset_field is not None)
    value_offsets = offsets[: len(values)]
    if any(o.size == 0 or (o[1:] <= o[:-1]).any() for o in value_offsets) or any(
        a[-1] >= b[0] for a, b in itertools.pairwise(value_offsets)
    ):
        return None
    names = [f.name for u in group for f in u.files]
    return StreamedGroup(
        "|".join(names),
        [src.uri(u.main.path) for u in group],
        not exact,
        values,
        tombs,
        value_offsets,
        offsets[len(values) :],
        nexts,
        src,
        shape,
    )
