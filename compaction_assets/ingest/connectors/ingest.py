"""One partition's pending landed files to batches ready to append, as its topic's `landing.format` says.

Each batch is a unit (one file, or a Confluent value file with its keys and headers; or Confluent files
whose offsets interleave) read whole, shaped, CDC-transformed and encoded; it is appended all or nothing
under its recorded name (the files' names joined by `|`), so that a file is ingested at most once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors import offsets, stream
from compaction_assets.ingest.connectors.connector import Connector
from compaction_assets.ingest.connectors.debezium import apply_cdc
from compaction_assets.ingest.connectors.layouts import LandedFile, PartitionSource, Unit, recorded_names
from compaction_assets.ingest.connectors.registry import connector_for
from compaction_assets.ingest.connectors.shaping import columns, csv_columns, json_rows
from compaction_assets.ingest.formats import avro_columns, canonical, readers
from compaction_assets.ingest.formats.file_formats import CONNECTOR_FILES, file_format
from compaction_assets.topics.landing_settings import FileFormat, LandingConfig


@dataclass
class Batch:
    """Records ready to append, and what the ingestion reports about them."""

    name: str  # recorded in the manifest's `ingested`
    files: list[str]
    table: pa.Table  # INPUT_SCHEMA
    where: columns.Where  # each row's file and record, for errors
    schema: canonical.ValueSchema | None
    mtime_timestamps: int = 0
    inferred_offsets: bool = False


def _data(src: PartitionSource, f: LandedFile, cfg: LandingConfig, connector: Connector) -> tuple[bytes, FileFormat]:
    fmt = file_format(f.name, CONNECTOR_FILES, cfg.file_format, json_is_array=connector.json_is_array)
    if fmt is FileFormat.CSV and connector.csv_refused is not None:
        raise InvalidInputError(f"{src.uri(f.path)}: {connector.csv_refused}")
    try:
        return src.storage.read_bytes(src.readable(f)), fmt
    except FileNotFoundError:
        raise InvalidInputError(f"{src.uri(f.path)}: vanished while being ingested; it lands at the next run") from None


def _vectorised(
    src: PartitionSource, unit: Unit, cfg: LandingConfig, read: list[tuple[bytes, FileFormat]], connector: Connector
) -> columns.Columns | None:
    """A Parquet, Avro, JSON or CSV unit column by column, change events too (None: shaped row by row)."""
    formats = {fmt for _, fmt in read}
    if len(formats) != 1:
        return None
    label = src.uri(unit.main.path)
    if formats == {FileFormat.PARQUET}:
        tables = [readers.read_table(data, src.uri(f.path)) for (data, _), f in zip(read, unit.files)]
        return connector.parquet_columns(tables, unit, label, cfg)
    fmt = formats.pop()
    if fmt is FileFormat.AVRO:
        records = [avro_columns.read_records(data) for data, _ in read]
        found = [r for r in records if r is not None]
        return connector.avro_columns(found, unit, label, cfg) if len(found) == len(read) else None
    if fmt is FileFormat.CSV:
        cells = [csv_columns.parse_csv(data) for data, _ in read]
        found_cells = [c for c in cells if c is not None]
        return connector.csv_columns(found_cells, unit, label, cfg) if len(found_cells) == len(read) else None
    if fmt not in (FileFormat.JSONL, FileFormat.JSON):
        return None
    parse = json_rows.parse_lines if fmt is FileFormat.JSONL else json_rows.parse_array
    rows = [parse(data) for data, _ in read]
    parsed = [r for r in rows if r is not None]
    return connector.json_columns(parsed, unit, label, cfg) if len(parsed) == len(read) else None


def _shape(src: PartitionSource, unit: Unit, cfg: LandingConfig) -> columns.Columns:
    """One unit's records, CDC applied, keys and values encoded."""
    connector = connector_for(cfg.format)
    files = connector.unit_files(unit)
    read = [_data(src, f, cfg, connector) for f in files]
    fast = _vectorised(src, unit, cfg, read, connector)
    if fast is not None:
        return fast
    rows = [readers.read_rows(data, fmt, src.uri(f.path)) for (data, fmt), f in zip(read, files)]
    names = [src.uri(f.path) for f in files]
    raw = connector.raw_records(rows, [fmt for _, fmt in read], names, unit, cfg)
    return columns.from_raw(apply_cdc(raw, cfg), src.uri(unit.main.path))


def encode(cols: columns.Columns, name: str, files: list[str]) -> Batch:
    """A unit's (or group's) columns as an INPUT_SCHEMA table with its value schema."""
    return Batch(name, files, cols.table(), cols.where, columns.value_schema(cols), cols.mtime_timestamps)


@dataclass(frozen=True)
class Work:
    """One batch to build: a unit, or a group of units whose offsets interleave, merged by offset (with the
    units' next starts, which place their records)."""

    units: tuple[Unit, ...]
    merged: bool = False
    next_starts: tuple[tuple[str, int | None], ...] = ()


def plan_work(
    src: PartitionSource, cfg: LandingConfig, ingested, whole: bool = False
) -> Iterator[Work | stream.StreamedGroup]:
    """The partition's pending batches, in the order they must be appended, not yet read: each a Work for
    `build`, or a Confluent Parquet group streamed unless `whole` (each group read into one table, as other
    formats are)."""
    connector = connector_for(cfg.format)
    units = connector.units(src)
    done = recorded_names(ingested)
    pending = [u for u in units if u.name not in done]
    if not connector.offsets_interleave:
        for u in pending:
            yield Work((u,))
        return
    nexts = offsets.next_starts(units)
    for group in offsets.groups(pending, nexts):
        streamed = None if whole else stream.plan(src, group, cfg, nexts, lambda u: _shape(src, u, cfg))
        if streamed is not None:
            yield streamed
            continue
        yield Work(tuple(group), merged=True, next_starts=tuple((u.name, nexts.get(u.name)) for u in group))


def build(src: PartitionSource, cfg: LandingConfig, work: Work) -> Batch:
    """A Work's records read, shaped and encoded: what an ingestion does with each batch, in this process or
    in a Spark task (ingest/spark_units.py)."""
    if not work.merged:
        unit = work.units[0]
        return encode(_shape(src, unit, cfg), unit.name, [src.uri(unit.main.path)])
    nexts = dict(work.next_starts)
    parts = [offsets.Part(u, _shape(src, u, cfg), nexts.get(u.name), src.uri(u.main.path)) for u in work.units]
    merged, exact = offsets.merge(parts, cfg.offset_field is not None)
    names = [f.name for u in work.units for f in u.files]
    batch = encode(merged, "|".join(names), [p.uri for p in parts])
    batch.inferred_offsets = not exact
    return batch


def builder(cfg: LandingConfig) -> Callable[[PartitionSource, Work], Batch]:
    """`build` with the topic's landing settings: what a Spark task calls for each Work (picklable)."""
    return functools.partial(_build_with, cfg)


def _build_with(cfg: LandingConfig, src: PartitionSource, work: Work) -> Batch:
    return build(src, cfg, work)


def batches(
    src: PartitionSource, cfg: LandingConfig, ingested, whole: bool = False
) -> Iterator[Batch | stream.StreamedGroup]:
    """The partition's pending batches read, in the order they must be appended (`plan_work`, each built)."""
    for work in plan_work(src, cfg, ingested, whole):
        yield work if isinstance(work, stream.StreamedGroup) else build(src, cfg, work)


def append_batch(handle, config, batch: Batch | stream.StreamedGroup, drop_invalid: bool):
    """Append one batch (a streamed group piece by piece), its value schema recorded before its records;
    a record's error names its file and record."""
    from compaction_assets.log import writer

    if isinstance(batch, stream.StreamedGroup):

        def pieces() -> Iterator[writer.Piece]:
            for cols in batch.pieces():
                _record_schema(handle, columns.value_schema(cols))
                yield writer.Piece(cols.table(), cols.where.__getitem__)

        return writer.append_pieces(
            handle,
            config,
            pieces,
            ingest_name=batch.name,
            source=batch.files[0],
            drop_invalid=drop_invalid,
            read_ahead=True,
        )
    _record_schema(handle, batch.schema)
    return writer.append(
        handle,
        config,
        batch.table,
        source=batch.files[0],
        drop_invalid=drop_invalid,
        ingest_name=batch.name,
        row_name=batch.where.__getitem__,
    )


def _record_schema(handle, schema: canonical.ValueSchema | None) -> None:
    """Merge a batch's value schema into the log's (a superset never hurts)."""
    if schema is not None:
        handle.st.makedirs(handle.dir)
        canonical.record_schema(handle.st, handle.path(canonical.SCHEMA_FILE), schema)
