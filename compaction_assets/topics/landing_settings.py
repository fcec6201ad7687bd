"""The landing keys of a topic's configuration (`landing.*`, `cdc.*`) as typed values."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class LandingFormat(str, Enum):
    """Which connector's layout and record shape the landing area holds."""

    NATIVE = "native"
    CONFLUENT = "confluent"
    AIVEN = "aiven"
    LENSES = "lenses"


class FileFormat(str, Enum):
    """The file format of landed objects (`auto`: by the name's extension)."""

    AUTO = "auto"
    AVRO = "avro"
    PARQUET = "parquet"
    JSONL = "jsonl"
    JSON = "json"
    CSV = "csv"


class CdcFormat(str, Enum):
    """How values carry change events."""

    NONE = "none"
    DEBEZIUM = "debezium"
    DEBEZIUM_FLAT = "debezium-flat"


LANDING_DEFAULTS: dict[str, object] = {
    "landing.format": "native",
    "landing.file.format": "auto",
    "landing.offset.field": None,
    "landing.timestamp.field": None,
    "cdc.format": "none",
    "cdc.version.fields": None,
}


@dataclass(frozen=True)
class VersionField:
    """One path of `cdc.version.fields` and the bits it takes in the packed version."""

    path: tuple[str, ...]
    bits: int

    @property
    def name(self) -> str:
        """The path as written in the configuration."""
        return ".".join(self.path)


@dataclass(frozen=True)
class LandingConfig:
    """A topic's landing settings, validated (see config.build_config)."""

    format: LandingFormat = LandingFormat.NATIVE
    file_format: FileFormat = FileFormat.AUTO
    offset_field: str | None = None
    timestamp_field: str | None = None
    cdc: CdcFormat = CdcFormat.NONE
    version_spec: str | None = None  # cdc.version.fields as configured
    version_fields: tuple[VersionField, ...] = ()
    version_header: str | None = None  # compaction.strategy.header, where the version goes

    def to_kafka(self) -> dict[str, object]:
        """The keys that differ from their defaults, as stored."""
        values = {
            "landing.format": self.format.value,
            "landing.file.format": self.file_format.value,
            "landing.offset.field": self.offset_field,
            "landing.timestamp.field": self.timestamp_field,
            "cdc.format": self.cdc.value,
            "cdc.version.fields": self.version_spec,
        }
        return {k: v for k, v in values.items() if v != LANDING_DEFAULTS[k]}


# A topic with no landing or cdc key set: native records, nothing to convert (most topics; build_config
# takes it without validating the keys one by one, so a native topic's configuration needs nothing more here)
NATIVE_LANDING = LandingConfig()

# Default widths of well-known version components (MySQL's binlog position); the others share the rest.
KNOWN_BITS = {"file": 20, "pos": 32, "row": 11}
VERSION_BITS = 63  # a packed version is a non-negative signed 64-bit integer


def parse_version_fields(text: str) -> tuple[VersionField, ...]:
    """`a.b,c:20,...` to VersionFields with their widths; ValueError (one line) when they cannot fit."""
    parts = [p.strip() for p in text.split(",")]
    if not parts or any(not p for p in parts):
        raise ValueError("must be a comma-separated list of field paths (e.g. source.lsn)")
    named: list[tuple[tuple[str, ...], int | None]] = []
    for part in parts:
        path, _, bits = part.partition(":")
        segs = tuple(s.strip() for s in path.split("."))
        if any(not s for s in segs):
            raise ValueError(f"{part!r} is not a field path")
        if bits and not bits.strip().isdigit():
            raise ValueError(f"{part!r}: the width after ':' must be a number of bits")
        width = int(bits) if bits else (None if len(parts) == 1 else KNOWN_BITS.get(segs[-1]))
        named.append((segs, width))
    fixed = sum(w for _, w in named if w is not None)
    free = [p for p, w in named if w is None]
    share = (VERSION_BITS - fixed) // len(free) if free else 0
    out = tuple(VersionField(p, w if w is not None else share) for p, w in named)
    if any(f.bits < 1 for f in out) or sum(f.bits for f in out) > VERSION_BITS:
        raise ValueError(
            f"the widths ({', '.join(f'{f.name}:{f.bits}' for f in out)}) must each be >= 1 "
            f"and total at most {VERSION_BITS} bits"
        )
    return out
