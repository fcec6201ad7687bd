"""Confluent's S3 sink: `<topic>/partition=<p>/<topic>+<p>+<start>.<ext>` value files, each with its `.keys`
and `.headers` siblings (one unit), and tombstone files in `<topic>/tombstone/`; no offset per record, so the
units whose offset ranges overlap are appended together (offsets.py). Records: shapes.confluent,
parquet_columns.confluent_parquet.
"""

from __future__ import annotations

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors import debezium_columns
from compaction_assets.ingest.connectors.connector import Connector
from compaction_assets.ingest.connectors.layouts import CONFLUENT_NAME, TOMBSTONE_DIR, LandedFile, PartitionSource, Unit
from compaction_assets.ingest.connectors.shaping import json_columns, shapes
from compaction_assets.ingest.connectors.shaping.columns import Columns
from compaction_assets.ingest.connectors.shaping.json_rows import JsonRows
from compaction_assets.ingest.connectors.shaping.parquet_columns import confluent_parquet
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.ingest.formats import avro_columns
from compaction_assets.ingest.formats.readers import Rows
from compaction_assets.topics.landing_settings import FileFormat, LandingConfig, LandingFormat


class Confluent(Connector):
    """A value file with its keys and headers files a unit (a tombstone file alone), by start offset."""

    format = LandingFormat.CONFLUENT
    file_name = CONFLUENT_NAME
    offsets_interleave = True
    csv_refused = (
        "Confluent's S3 sink writes no CSV (its format.class is Avro, JSON, Parquet or ByteArray); "
        "landing.format confluent reads .avro, .json and .parquet"
    )

    def units(self, src: PartitionSource) -> list[Unit]:
        """Value files with their views, and tombstone files, by start offset (a tombstone file after the
        value file starting at the same offset); a value file without its keys file is refused."""
        values: dict[str, LandedFile] = {}
        views: dict[tuple[str, str], LandedFile] = {}
        units = []
        for f in src.files:
            m = CONFLUENT_NAME.match(f.name.rsplit("/", 1)[-1])
            if m is None or m["topic"] != src.topic or int(m["p"]) != src.partition:
                raise InvalidInputError(
                    f"{src.uri(f.path)}: not named {src.topic}+{src.partition}+<start offset>"
                    ".<ext> as Confluent's S3 sink names it (landing.format confluent)"
                )
            if f.name.startswith(TOMBSTONE_DIR + "/"):
                if m["view"] == ".keys":
                    units.append(Unit(f.name, (f,), int(m["start"]), tombstone=True))
            elif m["view"]:
                views[(m["start"] + (m["ext"] or ""), m["view"])] = f
            else:
                values[m["start"] + (m["ext"] or "")] = f
        units += [self._value_unit(src, stem, f, views) for stem, f in values.items()]
        return sorted(units, key=lambda u: (u.start, u.tombstone))

    @staticmethod
    def _value_unit(src: PartitionSource, stem: str, f: LandedFile, views: dict[tuple[str, str], LandedFile]) -> Unit:
        keys, headers = views.get((stem, ".keys")), views.get((stem, ".headers"))
        if keys is None:
            raise InvalidInputError(
                f"{src.uri(f.path)}: no keys file beside it (the connector needs "
                "store.kafka.keys=true; a file still being uploaded lands at the next run)"
            )
        members = (f, keys) + ((headers,) if headers else ())
        return Unit(f.name, members, int(stem.split(".")[0]))

    def unit_files(self, unit: Unit) -> tuple[LandedFile, ...]:
        """The value file, its keys and its headers (a tombstone file alone)."""
        return unit.files

    def parquet_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """The unit's Parquet files column by column."""
        if unit.tombstone:
            return confluent_parquet(None, tables[0], None, label, cfg, unit.main.mtime_ms)
        headers = tables[2] if len(tables) > 2 else None
        rule = debezium_columns.rule(cfg)
        return confluent_parquet(tables[0], tables[1], headers, label, cfg, unit.main.mtime_ms, rule)

    def json_columns(self, rows: list[JsonRows], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """The unit's JSON Lines files column by column (Confluent's `.json` is JSON Lines)."""
        lines = [r.values for r in rows]
        if unit.tombstone:
            return json_columns.confluent_json(None, lines[0], None, label, cfg, unit.main.mtime_ms)
        headers = lines[2] if len(lines) > 2 else None
        rule = debezium_columns.rule(cfg)
        return json_columns.confluent_json(lines[0], lines[1], headers, label, cfg, unit.main.mtime_ms, rule)

    def avro_columns(self, records: list[pa.Array], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """The unit's Avro files read into Arrow, shaped as the Parquet ones: the values a table of their
        fields, the keys (any type) and headers one column each."""
        if unit.tombstone:
            keys = avro_columns.column_table(records[0], "key")
            return None if keys is None else self.parquet_columns([keys], unit, label, cfg)
        tables = [avro_columns.records_table(records[0]), avro_columns.column_table(records[1], "key")]
        if len(records) > 2:
            tables.append(avro_columns.column_table(records[2], "headers"))
        if any(t is None for t in tables):
            return None
        return self.parquet_columns([t for t in tables if t is not None], unit, label, cfg)

    def raw_records(
        self, rows: list[Rows], fmts: list[FileFormat], names: list[str], unit: Unit, cfg: LandingConfig
    ) -> RawBatch:
        """The unit's files row by row."""
        if unit.tombstone:
            return shapes.confluent(None, rows[0], None, names, fmts, cfg, unit.main.mtime_ms)
        headers = rows[2] if len(rows) > 2 else None
        return shapes.confluent(rows[0], rows[1], headers, names, fmts, cfg, unit.main.mtime_ms)
