"""Debezium change events to the records a compacted log keeps, and their source positions as versions.

`cdc.format`:
- `debezium`: the raw envelope `{before, after, source, op, ts_ms}`. `op` c, u, r: the value is `after`;
  `d`: a tombstone of the key; `t` (truncate) is refused: a truncate removes every row of a table and has
  no key, so it cannot be one record of a compacted log (configure Debezium with `skipped.operations=t`).
  A null value (the tombstone Debezium writes after a delete, `tombstones.on.delete`) stays a tombstone.
- `debezium-flat`: the row flattened by `ExtractNewRecordState`; `__deleted` = "true" (with
  `delete.tombstone.handling.mode=rewrite`) is a tombstone; the `__*` fields it adds are kept in the value.

`cdc.version.fields` (paths into the event, e.g. `source.lsn`, or `__lsn` when flattened) are packed into
one 8-byte big-endian signed version, the header named by `compaction.strategy.header`, so that the header
strategy keeps each row's latest change by the source's position whatever the partition's order. Each path
takes a fixed number of bits (`path:bits`; defaults: one path 63 bits; MySQL's `file` 20, `pos` 32,
`row` 11; the others share what is left) and the packed fields compare as the tuple does: the first path
most significant. A component must be a non-negative integer (or text of digits, or text ending in digits
such as a binlog file name `mysql-bin.000042`, whose number is taken) below 2**bits; one that is not is
refused, naming the record. SQL Server's LSN text (`change_lsn`, `commit_lsn`: `00000027:00000758:0003`,
80 bits) is taken as its three parts in order: the slot 12 bits, the log block 27, the VLF sequence the
field's rest (24 of 63), a part too large for its bits refused. The version of an event without its
fields (the tombstone after a delete) is absent: it then loses to the versioned delete event, which is
already a tombstone of its key.
"""

from __future__ import annotations

import re
from typing import Any

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.connectors.shaping.shapes import RawBatch
from compaction_assets.topics.landing_settings import CdcFormat, LandingConfig, VersionField

TRAILING_DIGITS = re.compile(r"(\d+)$")
# SQL Server's LSN text (`change_lsn`, `commit_lsn`): VLF sequence : log block : slot, hexadecimal, 80 bits.
SQLSERVER_LSN = re.compile(r"^([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{4})$")
LSN_BLOCK_BITS, LSN_SLOT_BITS = 27, 12  # the VLF sequence takes the field's other bits (24 of 63)


def _sqlserver_lsn(text: str, f: VersionField, where: str) -> int | None:
    """An LSN's three parts packed into the field's bits in their order (None: not an LSN)."""
    m = SQLSERVER_LSN.match(text)
    if m is None:
        return None
    vlf, block, slot = (int(g, 16) for g in m.groups())
    widths = (f.bits - LSN_BLOCK_BITS - LSN_SLOT_BITS, LSN_BLOCK_BITS, LSN_SLOT_BITS)
    for part, value, bits in zip(("VLF sequence", "log block", "slot"), (vlf, block, slot), widths):
        if bits < 1 or value >= 1 << bits:
            raise InvalidInputError(
                f"{where}: version field {f.name}={text!r}: its {part} {value} does not fit in "
                f"{max(bits, 0)} bits of the 64-bit version (cdc.version.fields)"
            )
    return (vlf << (LSN_BLOCK_BITS + LSN_SLOT_BITS)) | (block << LSN_SLOT_BITS) | slot


def _path(obj: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _component(raw: Any, f: VersionField, where: str) -> int:
    if isinstance(raw, str) and (lsn := _sqlserver_lsn(raw, f, where)) is not None:
        return lsn
    if isinstance(raw, str):
        m = TRAILING_DIGITS.search(raw)
        if m is None:
            raise InvalidInputError(f"{where}: version field {f.name}={raw!r} has no number (cdc.version.fields)")
        raw = int(m.group(1))
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise InvalidInputError(f"{where}: version field {f.name}={raw!r} is not an integer (cdc.version.fields)")
    if not 0 <= raw < (1 << f.bits):
        raise InvalidInputError(
            f"{where}: version field {f.name}={raw} does not fit in its {f.bits} bits of the "
            "64-bit version (cdc.version.fields: give it more with path:bits)"
        )
    return raw


def pack_version(event: Any, fields: tuple[VersionField, ...], where: str) -> bytes | None:
    """The version of one event as 8 big-endian bytes, or None when the event has none of the fields."""
    raws = [_path(event, f.path) for f in fields]
    if all(r is None for r in raws):
        return None
    missing = [f.name for f, r in zip(fields, raws) if r is None]
    if missing:
        raise InvalidInputError(f"{where}: version field(s) {', '.join(missing)} missing (cdc.version.fields)")
    packed = 0
    for f, raw in zip(fields, raws):
        packed = (packed << f.bits) | _component(raw, f, where)
    return packed.to_bytes(8, "big", signed=True)


def _envelope(value: Any, where: str) -> Any:
    """The value a raw Debezium envelope stands for (None: a tombstone)."""
    if value is None:
        return None
    if not isinstance(value, dict) or "op" not in value:
        raise InvalidInputError(
            f"{where}: not a Debezium change event (no 'op'; cdc.format debezium expects "
            "the raw envelope, debezium-flat the ExtractNewRecordState row)"
        )
    op = value["op"]
    if op == "d":
        return None
    if op in ("c", "u", "r"):
        after = value.get("after")
        if after is None:
            raise InvalidInputError(f"{where}: op={op!r} without 'after'")
        return after
    if op == "t":
        raise InvalidInputError(
            f"{where}: op='t' (truncate) cannot be compacted per key; configure the connector with skipped.operations=t"
        )
    raise InvalidInputError(f"{where}: unknown Debezium op {op!r} (expected c, u, d, r)")


def _flat(value: Any, where: str) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInputError(f"{where}: not a flattened Debezium row (expected a record)")
    deleted = value.get("__deleted")
    return None if deleted is True or (isinstance(deleted, str) and deleted.lower() == "true") else value


def version_header(cfg: LandingConfig) -> str | None:
    """The header a packed version goes into, or None when the topic packs none."""
    if not cfg.version_fields:
        return None
    assert cfg.version_header is not None  # build_config requires compaction.strategy.header with the fields
    return cfg.version_header


def apply_cdc(batch: RawBatch, cfg: LandingConfig) -> RawBatch:
    """The batch with change events turned into values and tombstones, versions in their header."""
    if cfg.cdc is CdcFormat.NONE:
        return batch
    unwrap = _envelope if cfg.cdc is CdcFormat.DEBEZIUM else _flat
    header = version_header(cfg)
    for i, event in enumerate(batch.values):
        where = batch.where[i]
        if header is not None:
            version = pack_version(event, cfg.version_fields, where)
            if version is not None:
                batch.headers[i] = [*batch.headers[i], (header, version)]
        batch.values[i] = unwrap(event, where)
    return batch
