"""A log's table lag: how far its topic's table is behind the log, from the marks of the table's current
snapshot (table/summary.py) and the log's manifests, no data read.

- **records**: the log's end offset less the end offset the table reflects (or the log's start offset,
  when that is higher: records below it are gone from the log). Appends and ingestions make it grow; a
  cleaning, retention or a log-start move leave it at 0 while the table is still a version behind.
- **milliseconds**: the time since the oldest change the log committed that the table does not reflect
  (the `committed_ms` of the manifest version right after the one the table reflects), 0 when the table
  reflects the log's version. Every change counts, records or not: a cleaning or retention changes what a
  reader of the table would see (deletes) as much as an append. When that version is no longer kept (the
  table is more than KEEP_VERSIONS changes behind), the oldest kept version after it is used, a lower
  bound (`at_least`).

The freshness bound is the topic's `table.freshness.ms`: a log is late when its lag in milliseconds passes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from compaction_assets.errors import CorruptLogError
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import identifier, locate, open_catalog, stored_table_name
from compaction_assets.table.summary import LogMark, marks_of
from compaction_assets.topics.config import TopicConfig


@dataclass(frozen=True)
class TableLag:
    """How far one log's table is behind the log, at `now`."""

    log: str
    log_version: int
    table_version: int | None  # the log version the table reflects (None: none yet)
    records: int
    milliseconds: int
    bound_ms: int  # the topic's table.freshness.ms
    at_least: bool = False  # the oldest unreflected version is no longer kept: `milliseconds` is a lower bound

    @property
    def behind(self) -> bool:
        """True when the table does not reflect the log's current version."""
        return self.log_version > 0 and (self.table_version is None or self.table_version < self.log_version)

    @property
    def late(self) -> bool:
        """True when the lag passes the topic's freshness bound."""
        return self.milliseconds > self.bound_ms

    def as_document(self) -> dict[str, Any]:
        """The lag as the command line and the asset's metadata show it."""
        return {
            "log_version": self.log_version,
            "table_log_version": self.table_version,
            "lag_records": self.records,
            "lag_ms": self.milliseconds,
            "lag_ms_is_lower_bound": self.at_least,
            "freshness_ms": self.bound_ms,
            "late": self.late,
        }


def lag_of(handle: LogHandle, manifest: Manifest, mark: LogMark | None, bound_ms: int, now: int) -> TableLag:
    """The lag of the log at `manifest` behind a table that reflects `mark` of it (None: nothing yet)."""
    version = mark.version if mark is not None else None
    if manifest.version == 0 or (version is not None and version >= manifest.version):
        return TableLag(handle.name, manifest.version, version, 0, 0, bound_ms)
    reflected_end = mark.log_end_offset if mark is not None else 0
    records = max(0, manifest.log_end_offset - max(reflected_end, manifest.log_start_offset))
    since, at_least = _first_unreflected_change(handle, manifest, version or 0)
    return TableLag(handle.name, manifest.version, version, records, max(0, now - since), bound_ms, at_least)


def _first_unreflected_change(handle: LogHandle, manifest: Manifest, reflected: int) -> tuple[int, bool]:
    """When the log committed the first version after `reflected`, and whether that is a later kept version's
    time instead (the first was trimmed)."""
    if reflected + 1 == manifest.version:
        return manifest.committed_ms, False
    kept = [v for v in handle.versions() if reflected < v <= manifest.version]
    for v in kept:
        try:
            return handle.manifest_version(v).committed_ms, v != reflected + 1
        except CorruptLogError:  # trimmed between the listing and the read: the next one
            continue
    return manifest.committed_ms, True


@dataclass(frozen=True)
class TopicSnapshot:
    """A topic's table's current snapshot as the lag reads it: its id and the logs' marks."""

    ident: str
    snapshot_id: int | None  # None: no table, or no snapshot yet
    marks: dict[str, LogMark]


def topic_snapshot(store: Storage, topic: str, configured: str | None = None) -> TopicSnapshot:
    """The topic's table's current snapshot: its id and marks (none when the topic has no table yet);
    `configured`: the topic's table.name (when None, as the store's configuration of the topic says)."""
    from pyiceberg.exceptions import NoSuchTableError

    location = locate(store)
    ident = identifier(location, topic, configured or stored_table_name(store, topic))
    try:
        current = open_catalog(location).load_table(ident).current_snapshot()
    except NoSuchTableError:
        return TopicSnapshot(ident, None, {})
    return TopicSnapshot(ident, current.snapshot_id if current else None, marks_of(current))


def lags(logs: Sequence[tuple[LogHandle, TopicConfig, Manifest]], now: int) -> dict[str, TableLag]:
    """Each log's lag at `now`, its topic's table read once for all its logs."""
    marks: dict[str, dict[str, LogMark]] = {}
    for handle, config, _ in logs:
        topic = parse_log_name(handle.name)[0]
        if topic not in marks:
            marks[topic] = topic_snapshot(handle.st, topic, config.table_name).marks
    if not logs:
        return {}
    by_name = {handle.name: (handle, config, manifest) for handle, config, manifest in logs}

    def lag(name: str) -> TableLag:  # a log behind by more than one version reads an older manifest
        handle, config, manifest = by_name[name]
        mark = marks[parse_log_name(name)[0]].get(name)
        return lag_of(handle, manifest, mark, config.table_freshness_ms, now)

    names = list(by_name)
    return dict(zip(names, logs[0][0].store.per_log(names, lag)))
