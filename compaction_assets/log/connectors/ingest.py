"""One partition's pending landed files to batches ready to append, as its topic's `landing.format` says.

Each batch is a unit (one file, or a Confluent value file with its keys and headers; or Confluent files
whose offsets interleave) read whole, shaped, CDC-transformed and encoded; it is appended all or nothing
under its recorded name (the files' names joined by `|`), so that a file is ingested at most once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.log.connectors import canonical, offsets, readers, shapes
from compaction_assets.log.connectors.debezium import apply_cdc
from compaction_assets.log.connectors.layouts import LandedFile, PartitionSource, Unit, plan_units, recorded_names
from compaction_assets.log.connectors.settings import FileFormat, LandingConfig, LandingFormat
from compaction_assets.log.records import INPUT_SCHEMA

HEADERS_TYPE = INPUT_SCHEMA.field("headers").type


@dataclass
class Batch:
    """Records ready to append, and what the ingestion reports about them."""
    name: str                 # recorded in the manifest's `ingested`
    files: list[str]
    table: pa.Table           # INPUT_SCHEMA
    where: list[str]          # each row's file and record, for errors
    schema: canonical.ValueSchema | None
    mtime_timestamps: int = 0
    inferred_offsets: bool = False


def pending_units(src: PartitionSource, fmt: LandingFormat, ingested) -> list[Unit]:
    """The units not yet ingested, in order."""
    done = recorded_names(ingested)
    return [u for u in plan_units(src, fmt) if u.name not in done]


def _read(src: PartitionSource, f: LandedFile, cfg: LandingConfig) -> tuple[readers.Rows, FileFormat]:
    uri = src.uri(f.path)
    fmt = readers.format_of(f.name, cfg.file_format, json_is_array=cfg.format is LandingFormat.AIVEN)
    try:
        data = src.storage.read_bytes(f.path)
    except FileNotFoundError:
        raise InvalidInputError(f"{uri}: vanished while being ingested; it lands at the next run") from None
    return readers.read_rows(data, fmt, uri), fmt


def _shape(src: PartitionSource, unit: Unit, cfg: LandingConfig) -> shapes.RawBatch:
    uri = src.uri(unit.main.path)
    if cfg.format is LandingFormat.AIVEN:
        rows, fmt = _read(src, unit.main, cfg)
        return shapes.aiven(rows, fmt, uri)
    if cfg.format is LandingFormat.LENSES:
        return shapes.lenses(_read(src, unit.main, cfg)[0], uri)
    read = [_read(src, f, cfg) for f in unit.files]
    names = [src.uri(f.path) for f in unit.files]
    fmts = [fmt for _, fmt in read]
    if unit.tombstone:
        return shapes.confluent(None, read[0][0], None, names, fmts, cfg, unit.main.mtime_ms)
    headers = read[2][0] if len(read) > 2 else None
    return shapes.confluent(read[0][0], read[1][0], headers, names, fmts, cfg, unit.main.mtime_ms)


def encode(raw: shapes.RawBatch, name: str, files: list[str]) -> Batch:
    """A shaped batch as an INPUT_SCHEMA table (canonical keys and values) with its value schema."""
    keys = [canonical.encode(k, w) for k, w in zip(raw.keys, raw.where)]
    values = [canonical.encode(v, w) for v, w in zip(raw.values, raw.where)]
    structured = [canonical.is_structured(v) for v in raw.values]
    headers = [[{"name": n, "value": v} for n, v in hs] for hs in raw.headers]
    try:
        table = pa.table({"offset": pa.array(raw.offsets, pa.int64()), "key": pa.array(keys, pa.binary()),
                          "value": pa.array(values, pa.binary()),
                          "timestamp": pa.array(raw.timestamps, pa.int64()),
                          "headers": pa.array(headers, HEADERS_TYPE)}, schema=INPUT_SCHEMA)
    except (pa.ArrowInvalid, OverflowError) as exc:
        raise InvalidInputError(f"{files[0]}: {exc}") from None
    return Batch(name, files, table, raw.where, canonical.infer_schema(values, structured), raw.mtime_timestamps)


def batches(src: PartitionSource, cfg: LandingConfig, ingested) -> Iterator[Batch]:
    """The partition's pending batches, in the order they must be appended."""
    units = plan_units(src, cfg.format)
    done = recorded_names(ingested)
    pending = [u for u in units if u.name not in done]
    if cfg.format is not LandingFormat.CONFLUENT:
        for u in pending:
            yield encode(apply_cdc(_shape(src, u, cfg), cfg), u.name, [src.uri(u.main.path)])
        return
    nexts = offsets.next_starts(units)
    for group in offsets.groups(pending, nexts):
        parts = [offsets.Part(u, _shape(src, u, cfg), nexts.get(u.name), src.uri(u.main.path))
                 for u in group]
        raw, exact = offsets.merge(parts, cfg.offset_field is not None)
        names = [f.name for u in group for f in u.files]
        batch = encode(apply_cdc(raw, cfg), "|".join(names), [p.uri for p in parts])
        batch.inferred_offsets = not exact
        yield batch
