"""Debezium change events turned into values, tombstones and version headers a whole column at once, as
debezium.py's `apply_cdc` turns them a record at a time (the rule a column-wise shape passes to
shaping/columns.keyed).

Raw envelopes: `op` c, u, r store `after`, d a tombstone, a null event stays one. Flattened rows: `__deleted`
true (or the text "true" in any case) a tombstone, the row stored whole otherwise. `cdc.version.fields`:
integer fields, or ASCII text ending in digits (a binlog file name), packed into the 8-byte version header
after the record's own headers. Whatever the per-record path would refuse or read in a way the columns
cannot follow exactly is None, and the caller shapes the unit row by row, which names the record: an event
without `op` or with another, `after` missing, a truncate, a version field missing beside the others, out of
its bits, of another type, SQL Server's LSN text (its three hexadecimal parts), text that is not ASCII.
"""

from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.connectors.debezium import SQLSERVER_LSN, version_header
from compaction_assets.ingest.connectors.shaping.columns import HEADER_TYPE, ValueRule
from compaction_assets.topics.landing_settings import CdcFormat, LandingConfig, VersionField

STORED_OPS = ("c", "u", "r")
KNOWN_OPS = (*STORED_OPS, "d")


def rule(cfg: LandingConfig) -> ValueRule | None:
    """The topic's change events as a column rule (None: it lands no change events)."""
    if cfg.cdc is CdcFormat.NONE:
        return None
    return functools.partial(_events, cfg)


def _events(cfg: LandingConfig, events: pa.Array, headers: pa.Array) -> tuple[pa.Array, pa.Array] | None:
    header = version_header(cfg)
    if header is not None:
        versions = _versions(events, cfg.version_fields)
        if versions is None:
            return None
        headers = _with_version(headers, header, *versions)
    values = _envelopes(events) if cfg.cdc is CdcFormat.DEBEZIUM else _flat(events)
    return None if values is None else (values, headers)


def _field(arr: pa.Array, name: str) -> pa.Array | None:
    """A struct's field, null where the struct is (None: the type has no such field)."""
    if not pa.types.is_struct(arr.type) or arr.type.get_field_index(name) < 0:
        return None
    return arr.flatten()[arr.type.get_field_index(name)]


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(pc.fill_null(mask, True)).as_py())


def _envelopes(events: pa.Array) -> pa.Array | None:
    """Each raw envelope's stored value: `after` for c, u, r; null for d and a null event."""
    if pa.types.is_null(events.type):
        return events
    op = _field(events, "op")
    if not pa.types.is_struct(events.type) or op is None or not pa.types.is_string(op.type):
        return None  # an event that is no object, or one without `op`: the rows refuse it
    present = events.is_valid()
    if not _all(pc.or_(pc.invert(present), pc.is_in(op, pa.array(KNOWN_OPS)))):
        return None  # a null, unknown or truncate op
    stored = pc.fill_null(pc.is_in(op, pa.array(STORED_OPS)), False)
    after = _field(events, "after")
    if after is None:
        return None if pc.any(stored).as_py() else pa.nulls(len(events))
    if not _all(pc.or_(pc.invert(stored), after.is_valid())):
        return None  # c, u or r without `after`
    try:
        return pc.if_else(stored, after, pa.scalar(None, after.type))
    except pa.ArrowNotImplementedError:
        return None


def _flat(rows: pa.Array) -> pa.Array | None:
    """Each flattened row, null where `__deleted` says it was deleted."""
    if pa.types.is_null(rows.type):
        return rows
    if not pa.types.is_struct(rows.type):
        return None
    deleted = _field(rows, "__deleted")
    if deleted is None or not (pa.types.is_boolean(deleted.type) or pa.types.is_string(deleted.type)):
        return rows  # absent, null or another type: never a deletion (as `deleted is True` reads it)
    if pa.types.is_string(deleted.type):
        if not _all(pc.string_is_ascii(deleted)):
            return None  # a case other than ASCII's: str.lower() decides
        deleted = pc.equal(pc.ascii_lower(deleted), "true")
    return pc.if_else(pc.fill_null(deleted, False), pa.scalar(None, rows.type), rows)


def _path(events: pa.Array, path: tuple[str, ...]) -> pa.Array:
    arr: pa.Array = events
    for part in path:
        child = _field(arr, part)
        if child is None:
            return pa.nulls(len(events))
        arr = child
    return arr


def _versions(events: pa.Array, fields: tuple[VersionField, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """Each event's packed version and whether it has one (none: none of the fields)."""
    raws = [_path(events, f.path) for f in fields]
    given = np.stack([r.is_valid().to_numpy(zero_copy_only=False) for r in raws])
    has: np.ndarray = np.asarray(given.all(axis=0))
    if (given.any(axis=0) & ~has).any():
        return None  # some fields missing beside the others: refused by the rows
    packed = np.zeros(len(events), dtype=np.uint64)
    for f, raw in zip(fields, raws):
        part = _component(raw, f, has)
        if part is None:
            return None
        packed = (packed << np.uint64(f.bits)) | part
    return packed, has


def _component(raw: pa.Array, f: VersionField, has: np.ndarray) -> np.ndarray | None:
    """One field's numbers where the events have a version (0 elsewhere); None: not all within its bits."""
    if pa.types.is_null(raw.type) or not has.any():
        return np.zeros(len(raw), dtype=np.uint64)
    if pa.types.is_string(raw.type):
        mine = pc.filter(raw, pa.array(has))
        if not _all(pc.string_is_ascii(mine)) or pc.any(pc.match_substring_regex(mine, SQLSERVER_LSN.pattern)).as_py():
            return None
        digits = pc.extract_regex(raw, r"(?P<n>[0-9]+)$")
        numbers = digits.flatten()[0]
        if not _all(pc.or_(pc.invert(pa.array(has)), numbers.is_valid())):
            return None  # text without a number
        try:
            raw = numbers.cast(pa.int64())
        except pa.ArrowInvalid:
            return None  # past 64 bits: past any field's bits too
    if not pa.types.is_integer(raw.type):
        return None
    try:
        values = pc.fill_null(raw.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    except pa.ArrowInvalid:
        return None
    values = np.where(has, values, 0)
    if (values < 0).any() or (values >= (1 << f.bits)).any():
        return None
    return values.astype(np.uint64)


def _with_version(headers: pa.Array, name: str, packed: np.ndarray, has: np.ndarray) -> pa.Array:
    """The headers with the version after each record's own (a record without a version: as they were)."""
    versions = packed[has].astype(">i8").view(np.uint8)
    count = int(has.sum())
    version_values = pa.Array.from_buffers(
        pa.binary(), count, [None, pa.py_buffer(np.arange(0, 8 * count + 1, 8, dtype=np.int32)), pa.py_buffer(versions)]
    )
    added = pa.StructArray.from_arrays(
        [pa.repeat(pa.scalar(name, pa.string()), count), version_values], fields=list(HEADER_TYPE)
    )
    offsets = headers.offsets.to_numpy().astype(np.int64)
    own = offsets[1:] - offsets[:-1]
    old = headers.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    new_offsets = np.zeros(len(headers) + 1, dtype=np.int64)
    np.cumsum(own + has, out=new_offsets[1:])
    order = np.empty(int(new_offsets[-1]), dtype=np.int64)  # where each entry of the result comes from
    rows = np.repeat(np.arange(len(headers)), own)
    order[new_offsets[rows] + np.arange(len(old)) - (offsets[rows] - offsets[0])] = np.arange(len(old))
    order[new_offsets[1:][has] - 1] = len(old) + np.arange(count)
    entries = pa.concat_arrays([old.cast(HEADER_TYPE), added]).take(pa.array(order))
    return pa.ListArray.from_arrays(pa.array(new_offsets.astype(np.int32)), entries, type=pa.list_(HEADER_TYPE))
