"""Aiven's S3 sink: `<topic>-<p>-<start offset>[.<ext>]` at the landing root, one file a unit, `.json` a JSON
array; records `{key, value, offset, timestamp, headers}` (shapes.aiven; column-wise
parquet_columns.aiven_parquet, json_columns.aiven_json, csv_columns.aiven_csv)."""

from __future__ import annotations

import pyarrow as pa

from compaction_assets.ingest.connectors import debezium_columns
from compaction_assets.ingest.connectors.connector import NamedByOffset
from compaction_assets.ingest.connectors.layouts import AIVEN_NAME, Layout, Unit
from compaction_assets.ingest.connectors.shaping import csv_columns, json_columns, shapes
from compaction_assets.ingest.connectors.shaping.columns import Columns
from compaction_assets.ingest.connectors.shaping.json_rows import JsonRows
from compaction_assets.ingest.connectors.shaping.parquet_columns import aiven_parquet
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.ingest.formats import avro_columns
from compaction_assets.ingest.formats.readers import Rows
from compaction_assets.topics.landing_settings import CdcFormat, FileFormat, LandingConfig, LandingFormat


class Aiven(NamedByOffset):
    """Aiven's files, by their start offset."""

    format = LandingFormat.AIVEN
    file_name = AIVEN_NAME
    layout = Layout.FLAT
    offset_group = "start"
    json_is_array = True

    def parquet_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """Aiven's Parquet records column by column."""
        return aiven_parquet(tables[0], label, debezium_columns.rule(cfg))

    def json_columns(self, rows: list[JsonRows], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """Aiven's JSON Lines records column by column."""
        return json_columns.aiven_json(rows[0], label, debezium_columns.rule(cfg))

    def avro_columns(self, records: list[pa.Array], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """The records read into Arrow, shaped as the Parquet ones."""
        table = avro_columns.records_table(records[0])
        return None if table is None else self.parquet_columns([table], unit, label, cfg)

    def csv_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """Aiven's CSV records column by column (bytes are no change events: the rows refuse them)."""
        return csv_columns.aiven_csv(tables[0], label) if cfg.cdc is CdcFormat.NONE else None

    def raw_records(
        self, rows: list[Rows], fmts: list[FileFormat], names: list[str], unit: Unit, cfg: LandingConfig
    ) -> RawBatch:
        """Aiven's records row by row."""
        return shapes.aiven(rows[0], fmts[0], names[0])
