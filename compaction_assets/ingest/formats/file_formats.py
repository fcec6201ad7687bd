"""A landed file's format by its name's extension: the one rule, with the extensions each reader takes.

The native input files (input_files.py) take Parquet, JSON Lines and Avro by their last extension; the
connectors' files (connectors/readers.py) also take CSV, a gzip-compressed file by the extension before
`.gz`, and a `landing.file.format` that overrides the name. Each refuses an unknown name in its own words.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from compaction_assets.errors import InvalidInputError
from compaction_assets.topics.landing_settings import FileFormat


@dataclass(frozen=True)
class Extensions:
    """The extensions one reader takes, and how it refuses a name it does not know."""

    formats: Mapping[str, FileFormat]  # lower-case extension, dot included
    gzip: bool  # `<name>.<ext>.gz` is a compressed `<ext>` file
    unknown: str  # the refusal, formatted with `name`

    @property
    def suffixes(self) -> tuple[str, ...]:
        """The extensions, for `str.endswith`."""
        return tuple(self.formats)


NATIVE_FILES = Extensions(
    {
        ".parquet": FileFormat.PARQUET,
        ".jsonl": FileFormat.JSONL,
        ".json": FileFormat.JSONL,
        ".ndjson": FileFormat.JSONL,
        ".avro": FileFormat.AVRO,
    },
    gzip=False,
    unknown="{name}: unsupported file type (expected .parquet, .jsonl, .json, .ndjson or .avro)",
)
CONNECTOR_FILES = Extensions(
    {
        ".avro": FileFormat.AVRO,
        ".parquet": FileFormat.PARQUET,
        ".jsonl": FileFormat.JSONL,
        ".ndjson": FileFormat.JSONL,
        ".json": FileFormat.JSONL,
        ".csv": FileFormat.CSV,
    },
    gzip=True,
    unknown=(
        "{name}: no known extension (.avro, .parquet, .json, .jsonl, .csv); set "
        "landing.file.format for names without one"
    ),
)


def file_format(
    name: object,
    extensions: Extensions,
    configured: FileFormat = FileFormat.AUTO,
    json_is_array: bool = False,
) -> FileFormat:
    """A file's format: `configured` unless AUTO, else by the name's last extension (the one before `.gz`
    where `extensions` take gzip); `.json` is a JSON array where the connector writes one (Aiven), else
    JSON Lines. An unknown extension is refused naming the file."""
    if configured is not FileFormat.AUTO:
        return configured
    lower = str(name).lower()
    if extensions.gzip and lower.endswith(".gz"):
        lower = lower[:-3]
    suffix = PurePosixPath(lower).suffix
    fmt = extensions.formats.get(suffix)
    if fmt is None:
        raise InvalidInputError(extensions.unknown.format(name=name))
    return FileFormat.JSON if (suffix == ".json" and json_is_array) else fmt
