"""Where a key's values are still reachable, and the time by which none is (`compaction reachable`).

Per key: in each log of its topic (log/reach.py: current files, older files, with their bounds), and in the
topic's table (docs/table.md, "Deletes that really delete"):
- the current snapshot shows a live row of it: the log's winner holds the value (no bound), or the table
  is behind the log (its next commit masks the row);
- a data file of the current snapshot still holds the masked row's bytes: its bucket is rewritten at the
  first commit after its oldest delete file is half of `delete.retention.ms` old (commit/rewrite.py), and the
  snapshots before that rewrite expire `delete.retention.ms` after it (commit/expiry.py);
- a file only older snapshots reach holds it: gone when the newest of them expires, at the first commit
  after `delete.retention.ms` from its time (the files no snapshot reaches are removed by that commit).
Bounds are times at which the runs that make the change become due: the change itself happens at the
first commit (or cleaning) at or after them.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from compaction_assets.errors import CompactionError
from compaction_assets.log.reach import Bound, LogKeyReach, latest, log_reach
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogHandle
from compaction_assets.table.commit.expiry import ORPHAN_GRACE_MS, reachable_files
from compaction_assets.table.reading.read import open_table
from compaction_assets.table.schema import partitions_filter
from compaction_assets.topics.config import TopicConfig

if TYPE_CHECKING:
    from pyiceberg.table import FileScanTask, Table

COLUMNS = ("partition", "key", "value")


@dataclass(frozen=True)
class SnapshotShows:
    """An older snapshot whose scan shows the value, and when the first commit expires it."""

    snapshot_id: int
    timestamp_ms: int
    expires_at_ms: int


@dataclass(frozen=True)
class TableKeyReach:
    """Where one key's value is in the topic's table, for one log partition."""

    partition: int
    live: bool  # the current snapshot shows a row with a value
    masked_files: tuple[str, ...]  # data files of the current snapshot holding its masked row
    older_files: tuple[str, ...]  # data files only older snapshots reach that hold it
    snapshots: tuple[SnapshotShows, ...]  # older snapshots that show it
    bounds: tuple[Bound, ...]

    def as_document(self) -> dict[str, object]:
        return {
            "partition": self.partition,
            "live_row": self.live,
            "masked_in_data_files": list(self.masked_files),
            "in_older_files": list(self.older_files),
            "older_snapshots": [
                {"snapshot_id": s.snapshot_id, "timestamp_ms": s.timestamp_ms, "expires_at_ms": s.expires_at_ms}
                for s in self.snapshots
            ],
            "bounds": [b.as_document() for b in self.bounds],
        }


@dataclass(frozen=True)
class KeyReach:
    """Where one key's values still are, and the single time by which none is (None: unreachable now)."""

    key: bytes
    logs: tuple[LogKeyReach, ...]
    table: tuple[TableKeyReach, ...]
    unreachable_by: Bound | None = None

    @property
    def unreachable(self) -> bool:
        return self.unreachable_by is None

    def as_document(self) -> dict[str, object]:
        by = self.unreachable_by
        return {
            "logs": {r.log: r.as_document() for r in self.logs if r.bounds or r.tombstone_offset is not None},
            "table": [t.as_document() for t in self.table],
            "unreachable_now": by is None,
            "unreachable_by_ms": None if by is None else by.at_ms,
            "unreachable_by": None if by is None else iso(by.at_ms) if by.at_ms is not None else "not bounded",
            "waiting_for": None if by is None else by.why,
        }


def iso(ms: int) -> str:
    """Milliseconds since the epoch as an ISO-8601 UTC time."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")


def reachable(logs: Sequence[tuple[LogHandle, TopicConfig]], keys: Sequence[bytes], now: int) -> list[KeyReach]:
    """Per key, where the logs of one topic and its table still hold a value of it, and until when."""
    wanted = list(dict.fromkeys(keys))
    in_logs = {handle.partition: log_reach(handle, config, wanted) for handle, config in logs}
    held = {(p, r.key) for p, reaches in in_logs.items() for r in reaches if _winner_holds_value(r)}
    retention = min(config.delete_retention_ms for _, config in logs)
    in_table = table_reach(logs[0][0].st, logs[0][0].topic, sorted(in_logs), wanted, retention, held, now)
    out = []
    for i, key in enumerate(wanted):
        log_part = tuple(reaches[i] for reaches in in_logs.values())
        table_part = tuple(in_table.get(key, ()))
        bounds = [b for r in log_part for b in r.bounds] + [b for t in table_part for b in t.bounds]
        out.append(KeyReach(key, log_part, table_part, latest(bounds)))
    return out


def _winner_holds_value(reach: LogKeyReach) -> bool:
    """Whether the log's winner of the key holds a value (a visible value without a winning tombstone)."""
    return bool(reach.value_offsets) and reach.tombstone_offset is None


@dataclass
class _Found:
    """What the scans of every snapshot found of one (partition, key)."""

    live: bool = False
    files: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))  # file -> snapshots reaching it
    shows: list[int] = field(default_factory=list)  # older snapshots showing it
    masked: dict[str, set[str]] = field(default_factory=dict)  # current data file -> its delete files
    loose: dict[str, int] = field(default_factory=dict)  # data files no snapshot reaches -> their mtime


def table_reach(
    store: Storage,
    topic: str,
    partitions: list[int],
    keys: list[bytes],
    retention_ms: int,
    held: set[tuple[int, bytes]],
    now: int,
) -> dict[bytes, list[TableKeyReach]]:
    """Per key, its reach in each partition of the topic's table that holds it (none without a table)."""
    try:
        table, _ = open_table(store, topic)
    except CompactionError:
        return {}
    found = _scan_snapshots(table, partitions, keys)
    deleted_at = _delete_file_times(table)
    times = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    out: dict[bytes, list[TableKeyReach]] = {}
    for (partition, key), f in sorted(found.items()):
        bounds = []
        if f.live:
            why = "the table is behind the log: its next commit (`compaction table commit`) masks the row"
            bounds.append(
                Bound(None, "the log's winner holds the value") if (partition, key) in held else Bound(now, why)
            )
        for path, deletes in f.masked.items():
            masked_since = min((deleted_at.get(d, now) for d in deletes), default=now)
            rewrite_at = masked_since + retention_ms // 2
            bounds.append(
                Bound(
                    rewrite_at + retention_ms,
                    f"data file {path} until its bucket's rewrite (due at "
                    f"{rewrite_at}) and the expiry of the snapshots before it",
                )
            )
        current = table.current_snapshot()
        older = {p: s for p, s in f.files.items() if current is None or current.snapshot_id not in s}
        for path, snapshots in older.items():
            bounds.append(
                Bound(max(times[s] for s in snapshots) + retention_ms, f"data file {path} of older snapshots")
            )
        for path, mtime in f.loose.items():
            bounds.append(
                Bound(
                    mtime + ORPHAN_GRACE_MS,
                    f"data file {path} no snapshot reaches: removed by the next "
                    "commit that expires a snapshot, once 10 minutes old",
                )
            )
        shows = tuple(SnapshotShows(s, times[s], times[s] + retention_ms) for s in f.shows)
        files = (*older, *f.loose)
        reach = TableKeyReach(partition, f.live, tuple(f.masked), files, shows, tuple(bounds))
        out.setdefault(key, []).append(reach)
    return out


def _scan_snapshots(table: Table, partitions: list[int], keys: list[bytes]) -> dict[tuple[int, bytes], _Found]:
    """Every snapshot's files that hold rows of the keys (read raw, deletes not applied) and its scan."""
    from pyiceberg.expressions import And, In, Reference
    from pyiceberg.expressions.literals import literal
    from pyiceberg.io.pyarrow import ArrowScan
    from pyiceberg.table import FileScanTask

    by_key = In(term=Reference("key"), values={literal(k) for k in keys})
    row_filter = And(partitions_filter(partitions), by_key)
    schema = table.schema().select(*COLUMNS)
    current = table.current_snapshot()
    raw: dict[str, pa.Table] = {}
    found: dict[tuple[int, bytes], _Found] = defaultdict(_Found)

    def read(tasks: list[FileScanTask]) -> pa.Table:
        return ArrowScan(table.metadata, table.io, schema, row_filter).to_table(tasks)

    for snapshot in table.metadata.snapshots:
        is_current = current is not None and snapshot.snapshot_id == current.snapshot_id
        tasks = list(table.scan(snapshot_id=snapshot.snapshot_id, row_filter=row_filter).plan_files())
        for task in tasks:
            path = task.file.file_path
            if path not in raw:
                raw[path] = read([FileScanTask(task.file)])
            for where in _with_values(raw[path]):
                found[where].files[path].add(snapshot.snapshot_id)
                if is_current:
                    found[where].masked[path] = {d.file_path for d in task.delete_files}
        for where in _with_values(read(tasks)):
            if is_current:
                found[where].live = True
            else:
                found[where].shows.append(snapshot.snapshot_id)
    for f in found.values():  # a current file without delete files holds a live row: the live row's bound
        f.masked = {p: d for p, d in f.masked.items() if d}
    _loose_files(table, partitions, keys, found)
    return found


def _loose_files(table: Table, partitions: list[int], keys: list[bytes], found: dict[tuple[int, bytes], _Found]):
    """The table's data files no snapshot reaches (not removed yet) holding values of the keys, added to
    `found`: read whole, they are few (expiry removes them once 10 minutes old)."""
    import pyarrow.compute as pc

    st = Storage.open(table.location())
    reached = reachable_files(table)
    for path, mtime in st.list_files_with_mtime(st.join("data")):
        if path in reached or not path.endswith(".parquet") or path.endswith("-deletes.parquet"):
            continue
        rows = st.read_parquet(path, columns=list(COLUMNS))
        mask = pc.and_(
            pc.is_in(rows.column("partition"), value_set=pa.array(partitions, rows.column("partition").type)),
            pc.is_in(rows.column("key"), value_set=pa.array(keys, pa.binary())),
        )
        for where in _with_values(rows.filter(mask)):
            found[where].loose[path] = mtime


def _with_values(rows: pa.Table) -> set[tuple[int, bytes]]:
    """(partition, key) of the rows holding a value."""
    return {(r["partition"], r["key"]) for r in rows.to_pylist() if r["value"] is not None}


def _delete_file_times(table: Table) -> dict[str, int]:
    """The commit time of every live delete file of the current snapshot (its bucket's rewrite counts from it)."""
    from pyiceberg.manifest import ManifestContent

    current = table.current_snapshot()
    by_id: dict[int, int] = {s.snapshot_id: s.timestamp_ms for s in table.metadata.snapshots}
    out: dict[str, int] = {}
    for manifest in current.manifests(table.io) if current is not None else []:
        if manifest.content != ManifestContent.DELETES:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            out[entry.data_file.file_path] = by_id.get(entry.snapshot_id or 0, 0)
    return out
