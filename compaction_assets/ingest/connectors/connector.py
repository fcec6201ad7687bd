"""What a connector's landing layout is: the questions ingestion asks of `landing.format`, answered once per
connector by a subclass of `Connector` in a module of its own (native.py, confluent.py, aiven.py, lenses.py)
and found through registry.py.

A layout says how its files are named, grouped into units and ordered; which files a unit reads; how its
records are shaped (a Parquet, Avro, JSON or CSV unit column by column, any unit row by row); whether `.json`
holds a JSON array; and whether its units' offsets interleave (then units whose ranges overlap are appended
together).
"""

from __future__ import annotations

import re
from typing import ClassVar

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.layouts import LandedFile, Layout, PartitionSource, Unit
from compaction_assets.ingest.connectors.shaping.columns import Columns
from compaction_assets.ingest.connectors.shaping.json_rows import JsonRows
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.ingest.formats.readers import Rows
from compaction_assets.topics.landing_settings import FileFormat, LandingConfig, LandingFormat


class Connector:
    """One connector's layout; the defaults are a layout of one file per unit, shaped row by row."""

    format: ClassVar[LandingFormat]
    file_name: ClassVar[re.Pattern[str] | None] = None  # how it names its files (None: any input file)
    layout: ClassVar[Layout] = Layout.PARTITION_FOLDER  # where it puts a partition's files
    native_records: ClassVar[bool] = False  # files in the product's own record shape, read by input_files.py
    json_is_array: ClassVar[bool] = False  # `.json` holds a JSON array of records (else JSON Lines)
    offsets_interleave: ClassVar[bool] = False  # units whose offset ranges overlap are appended as one batch
    # why a CSV file is none of this connector's (None: its sink writes CSV); a `.csv` file, or
    # `landing.file.format csv`, is then refused with it rather than shaped as records it never holds
    csv_refused: ClassVar[str | None] = None

    def units(self, src: PartitionSource) -> list[Unit]:
        """Every unit of a partition's files, in ingestion order."""
        raise NotImplementedError

    def looks_like(self, src: PartitionSource, f: LandedFile) -> bool:
        """Whether a landed file is where and as this connector puts and names its files (a refusal under
        another `landing.format` then names this one)."""
        base = f.name.rsplit("/", 1)[-1]
        return self.file_name is not None and src.layout is self.layout and self.file_name.match(base) is not None

    def unit_files(self, unit: Unit) -> tuple[LandedFile, ...]:
        """The files a unit's records are read from, the unit's own first."""
        return (unit.main,)

    def parquet_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """A Parquet unit's records column by column (None: shaped row by row); `label` names it in errors."""
        return None

    def json_columns(self, rows: list[JsonRows], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """A JSON unit's records column by column from each file's values (json_columns.parse_lines or
        parse_array); None: shaped row by row."""
        return None

    def avro_columns(self, records: list[pa.Array], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """An Avro unit's records column by column from each file's records (avro_columns.read_records);
        None: shaped row by row."""
        return None

    def csv_columns(self, tables: list[pa.Table], unit: Unit, label: str, cfg: LandingConfig) -> Columns | None:
        """A CSV unit's records column by column from each file's cells (csv_columns.parse_csv); None: shaped
        row by row."""
        return None

    def raw_records(
        self, rows: list[Rows], fmts: list[FileFormat], names: list[str], unit: Unit, cfg: LandingConfig
    ) -> RawBatch:
        """A unit's records row by row, from each of its files' rows, formats and names."""
        raise NotImplementedError


class NamedByOffset(Connector):
    """A layout of one file per unit, named by an offset (`file_name`'s group `offset_group`)."""

    offset_group: ClassVar[str]

    def units(self, src: PartitionSource) -> list[Unit]:
        """Each file a unit, by offset; a file not named as the connector names them is refused."""
        assert self.file_name is not None  # every such layout names its files
        units = []
        for f in src.files:
            m = self.file_name.match(f.name)
            if m is None:
                raise InvalidInputError(
                    f"{src.uri(f.path)}: not named as the {self.format.value} connector names its files "
                    "(landing.format)"
                )
            units.append(Unit(f.name, (f,), int(m[self.offset_group])))
        return sorted(units, key=lambda u: u.start)
