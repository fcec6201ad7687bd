"""Each connector's record shape to one batch of key, value, offset, timestamp and headers (still typed).

- Confluent: a value file, its `.keys` and `.headers` files row by row (Parquet keys wrapped as `{key}`,
  Parquet and JSON headers as `{headers: [...]}`); offset and timestamp only from the value fields named by
  `landing.offset.field` / `landing.timestamp.field` (removed from the value), else unknown / the object's
  modification time. A tombstone file holds keys only.
- Aiven: `{key, value, offset, timestamp, headers}` per record (JSON timestamps ISO-8601; Avro/Parquet
  headers a map); CSV rows `key,value,offset,timestamp` with base64 key and value, an empty value a tombstone.
- Lenses (`store.envelope=true`): `{key, value, headers, metadata: {timestamp, offset, ...}}`; base64 key
  or value when `keyIsArray` / `valueIsArray`; a missing value is a tombstone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.readers import Rows
from compaction_assets.segments.headers import HeaderRules, parse_headers
from compaction_assets.segments.records import decode_base64
from compaction_assets.topics.landing_settings import FileFormat, LandingConfig

MISSING = object()


@dataclass
class RawBatch:
    """Records of one unit, keys and values as the connector typed them."""

    keys: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    offsets: list[int | None] = field(default_factory=list)
    timestamps: list[int | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    mtime_timestamps: int = 0  # records whose timestamp is the object's modification time

    def add(self, key: Any, value: Any, offset: Any, ts: Any, headers: list, where: str) -> None:
        """One record (offset and timestamp checked to be integers or None)."""
        self.keys.append(key)
        self.values.append(value)
        # the common case (an int or None) without the checks' calls: 5M records pay them 5M times
        self.offsets.append(offset if offset is None or type(offset) is int else _long(offset, where, "offset"))
        self.timestamps.append(ts if ts is None or type(ts) is int else to_ms(ts, where))
        self.headers.append(headers)
        self.where.append(where)

    def __len__(self) -> int:
        return len(self.keys)


def _long(v: Any, where: str, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidInputError(f"{where}: {what} must be an integer, got {v!r}")
    return v


def to_ms(v: Any, where: str) -> int | None:
    """A timestamp as ms since the epoch: an integer, a datetime, or ISO-8601 text."""
    if v is None or (isinstance(v, int) and not isinstance(v, bool)):
        return v
    if isinstance(v, str):
        try:
            v = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(f"{where}: timestamp {v!r} is neither an integer nor ISO-8601") from None
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return int(v.timestamp() * 1000)
    raise InvalidInputError(f"{where}: timestamp must be an integer or ISO-8601 text, got {v!r}")


def _b64(v: Any, where: str, what: str) -> bytes | None:
    return None if v is None else decode_base64(v, f"{where}: {what}")


def _connector_header_value(value: Any, name: str, where: str) -> bytes | None:
    """A connector's header value: text (its UTF-8), bytes or null."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if value is not None and not isinstance(value, bytes):
        raise InvalidInputError(f"{where}: header {name!r} value must be text, bytes or null")
    return value


# a list of {key|name, value} records (Kafka Connect's), a map, or (name, value) pairs; values text or bytes
CONNECTOR_HEADERS = HeaderRules(
    maps=True,
    sequences=(list,),
    record_names=("key", "name"),
    pairs=True,
    value=_connector_header_value,
    not_a_list="{where}: headers must be a list or a map, got {kind}",
    malformed="{where}: malformed header {header!r}",
    name_not_text="{where}: header name {name!r} is not text",
)


def header_pairs(raw: Any, where: str) -> list[tuple[str, bytes | None]]:
    """Headers from a list of {key|name, value}, a map, or (name, value) pairs; values text or bytes."""
    return parse_headers(raw, where, CONNECTOR_HEADERS)


# --- Confluent ---------------------------------------------------------------------------------------------


def _take(value: Any, cfg: LandingConfig, where: str) -> tuple[Any, Any, Any]:
    """(offset, timestamp, the value without them) for the InsertField fields configured; refused when absent."""
    names = [(cfg.offset_field, "landing.offset.field"), (cfg.timestamp_field, "landing.timestamp.field")]
    if cfg.offset_field is None and cfg.timestamp_field is None:
        return None, None, value
    for name, key in names:
        taken = key == "landing.timestamp.field" and name == cfg.offset_field  # the offset took it already
        if name is not None and (not isinstance(value, dict) or name not in value or taken):
            raise InvalidInputError(f"{where}: no field {name!r} in the value ({key} names it)")
    rest = dict(value)  # one copy for both fields
    offset = rest.pop(cfg.offset_field) if cfg.offset_field is not None else None
    ts = rest.pop(cfg.timestamp_field) if cfg.timestamp_field is not None else None
    return offset, ts, rest


def _unwrap(item: Any, name: str, fmt: FileFormat) -> Any:
    if (
        fmt in (FileFormat.PARQUET, FileFormat.JSON, FileFormat.JSONL)
        and name == "headers"
        and isinstance(item, dict)
        and set(item) == {"headers"}
    ):
        return item["headers"]
    if fmt is FileFormat.PARQUET and name == "key" and isinstance(item, dict) and set(item) == {"key"}:
        return item["key"]
    return item


def confluent(
    values: Rows | None,
    keys: Rows,
    headers: Rows | None,
    names: list[str],
    fmts: list[FileFormat],
    cfg: LandingConfig,
    mtime_ms: int,
) -> RawBatch:
    """A value file with its keys and headers files (or a tombstone file: `values` None), row by row."""
    counts = [len(r.items) for r in (values, keys, headers) if r is not None]
    if len(set(counts)) > 1:
        listed = ", ".join(f"{n} ({c} rows)" for n, c in zip(names, counts))
        raise InvalidInputError(f"{names[0]}: its files hold different numbers of records: {listed}")
    batch = RawBatch()
    for i in range(len(keys.items)):
        where = f"{names[0]}: {keys.where(i)}"
        key = _unwrap(keys.items[i], "key", fmts[1 if values is not None else 0])
        hdrs = header_pairs(_unwrap(headers.items[i], "headers", fmts[2]), where) if headers else []
        if values is None:
            batch.add(key, None, None, mtime_ms, hdrs, where)
            batch.mtime_timestamps += 1
            continue
        value = values.items[i]
        offset, ts, value = _take(value, cfg, where)
        if ts is None:
            ts = mtime_ms
            batch.mtime_timestamps += 1
        batch.add(key, value, offset, ts, hdrs, where)
    return batch


# --- Aiven and Lenses --------------------------------------------------------------------------------------


def aiven(rows: Rows, fmt: FileFormat, name: str) -> RawBatch:
    """Aiven's records (`format.output.fields` any of key, value, offset, timestamp, headers)."""
    batch = RawBatch()
    for i, item in enumerate(rows.items):
        where = f"{name}: {rows.where(i)}"
        if fmt is FileFormat.CSV:
            cells = list(item) + [""] * (4 - len(item))
            key, value = _b64(cells[0] or None, where, "key"), _b64(cells[1] or None, where, "value")
            try:
                offset, ts = (int(c) if c else None for c in cells[2:4])
            except ValueError:
                raise InvalidInputError(f"{where}: offset and timestamp must be integers") from None
            batch.add(key, value, offset, ts, [], where)
            continue
        if not isinstance(item, dict):
            raise InvalidInputError(f"{where}: expected a record with key, value, offset, timestamp, headers")
        batch.add(
            item.get("key"),
            item.get("value"),
            item.get("offset"),
            item.get("timestamp"),
            header_pairs(item.get("headers"), where),
            where,
        )
    return batch


def lenses(rows: Rows, name: str) -> RawBatch:
    """Lenses' envelopes (`store.envelope=true`)."""
    batch = RawBatch()
    for i, item in enumerate(rows.items):
        where = f"{name}: {rows.where(i)}"
        if not isinstance(item, dict) or not isinstance(item.get("metadata"), dict):
            raise InvalidInputError(
                f"{where}: expected an envelope with key, value, headers and metadata (store.envelope=true)"
            )
        key, value = item.get("key"), item.get("value")
        if item.get("keyIsArray"):
            key = _b64(key, where, "key")
        if item.get("valueIsArray"):
            value = _b64(value, where, "value")
        meta = item["metadata"]
        batch.add(
            key, value, meta.get("offset"), meta.get("timestamp"), header_pairs(item.get("headers"), where), where
        )
    return batch
