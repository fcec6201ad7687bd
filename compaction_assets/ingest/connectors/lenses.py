"""Lenses Stream Reactor's S3 sink: `<topic>/<p>/<lastOffset>_<minTs>_<maxTs>.<ext>`, one file a unit;
envelopes `{key, value, headers, metadata}` (shapes.lenses, parquet_columns.lenses_parquet)."""

from __future__ import annotations

import pyarrow as pa

from compaction_assets.ingest.connectors import debezium_columns
from compaction_assets.ingest.connectors.connector import NamedByOffset
from compaction_assets.ingest.connectors.layouts import LENSES_NAME, Layout, Unit
from compaction_assets.ingest.connectors.shaping import json_columns, shapes
from compaction_assets.ingest.connectors.shaping.columns import Columns
from compaction_assets.ingest.connectors.shaping.json_rows import JsonRows
from compaction_assets.ingest.connectors.shaping.parquet_columns import lenses_parquet
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.ingest.formats import avro_columns
from compaction_assets.ingest.formats.readers import Rows
from compaction_assets.topics.landing_settings import FileFormat, LandingConfig, LandingFormat


class Lenses(NamedByOffset):
    """Lenses' files, by their last offset."""

    format = LandingFormat.LENSES
    file_name = LENSES_NAME
    layout = Layout.LENSES
    offset_group = "last"
    csv_refused = (
        "Lenses' S3 sink writes CSV only without store.envelope, so its CSV holds no key nor offset; "
        "landing.format lenses reads STOREAS AVRO, PARQUET or JSON with store.envelope=true"
    )

    def parquet_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """Lenses' Parquet envelopes column by column."""
        return lenses_parquet(tables[0], label, debezium_columns.rule(cfg))

    def json_columns(self, rows: list[JsonRows], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """Lenses' JSON Lines envelopes column by column."""
        return json_columns.lenses_json(rows[0], label, debezium_columns.rule(cfg))

    def avro_columns(self, records: list[pa.Array], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """The records read into Arrow, shaped as the Parquet ones."""
        table = avro_columns.records_table(records[0])
        return None if table is None else self.parquet_columns([table], unit, label, cfg)

    def raw_records(
        self, rows: list[Rows], fmts: list[FileFormat], names: list[str], unit: Unit, cfg: LandingConfig
    ) -> RawBatch:
        """Lenses' envelopes row by row."""
        return shapes.lenses(rows[0], names[0])
