"""Reading a topic's table: its snapshots with the log versions each reflects, and time travel."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from compaction_assets.store.fs import Storage
from compaction_assets.table.catalog import TableError, identifier, locate, open_catalog, stored_table_name
from compaction_assets.table.schema import partitions_filter
from compaction_assets.table.summary import LOG, ROWS_ADDED, ROWS_DELETED, marks_of

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

TIME_FROM_MS = 10**11  # an --as-of integer at least this is milliseconds since the epoch; below, a log version
# An integer naming a snapshot that is not one of the table's is a snapshot id from this on (pyiceberg draws
# ids from 63 bits, so a real one is below it about once in 10,000), a time in milliseconds below it.
SNAPSHOT_ID_FROM = 10**15
SnapshotPoint = int | str | dt.datetime  # a snapshot id, or a time: milliseconds, ISO-8601 text, a datetime


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of a topic's table and what it reflects."""

    snapshot_id: int
    timestamp_ms: int
    operation: str
    log: str | None  # the logs it committed, comma-separated (None: a rewrite, or not the product's)
    log_versions: dict[str, int] = field(default_factory=dict)
    rows_added: int = 0
    rows_deleted: int = 0


def open_table(store: Storage, topic: str) -> tuple[Table, str]:
    """The topic's table (named as the store's configuration of the topic says) and its identifier; one line
    when the topic has none yet."""
    from pyiceberg.exceptions import NoSuchTableError

    location = locate(store)
    ident = identifier(location, topic, stored_table_name(store, topic))
    try:
        return open_catalog(location).load_table(ident), ident
    except NoSuchTableError:
        raise TableError(
            f"topic {topic!r} has no table {ident} yet (the latest_state step, or `compaction table commit`, writes it)"
        ) from None


def history(table: Table) -> list[SnapshotInfo]:
    """The table's snapshots, oldest first, with the log versions each reflects."""
    out = []
    for s in table.snapshots():
        assert s.summary is not None  # the format version the product's tables have (2) requires one
        props = s.summary.additional_properties
        out.append(
            SnapshotInfo(
                s.snapshot_id,
                s.timestamp_ms,
                s.summary.operation.value,
                props.get(LOG),
                {k: v.version for k, v in marks_of(s).items()},
                int(props.get(ROWS_ADDED, 0)),
                int(props.get(ROWS_DELETED, 0)),
            )
        )
    return out


def parse_as_of(text: str) -> tuple[str, int]:
    """`--as-of`: ("version", N) for a log version, ("time", ms) for ms since the epoch or an ISO-8601 time."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        value = int(text)
        return ("time", value) if value >= TIME_FROM_MS else ("version", value)
    moment = iso_time_ms(text)
    if moment is None:
        raise TableError(
            f"--as-of {text!r}: expected a log version, milliseconds since the epoch, or an "
            "ISO-8601 time such as 2026-11-26T10:00:00Z"
        )
    return "time", moment


def iso_time_ms(text: str) -> int | None:
    """Milliseconds since the epoch of an ISO-8601 time (UTC when it names no zone); None if it is not one."""
    try:
        moment = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return time_ms(moment)


def time_ms(moment: dt.datetime) -> int:
    """Milliseconds since the epoch of a time (UTC when it names no zone)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def snapshot_as_of(table: Table, log: str, as_of: str) -> SnapshotInfo:
    """The snapshot that shows `log` as of a log version (the newest reflecting at most it) or a time."""
    kind, value = parse_as_of(as_of)
    snaps = history(table)
    if kind == "time":
        found = [s for s in snaps if s.timestamp_ms <= value]
    else:
        found = [s for s in snaps if 0 < s.log_versions.get(log, 0) <= value]
    if not found:
        oldest = snaps[0] if snaps else None
        kept = (
            f"the oldest kept snapshot reflects version {oldest.log_versions.get(log)} at {oldest.timestamp_ms} ms"
            if oldest
            else "the table has no snapshot"
        )
        raise TableError(
            f"no snapshot of the table shows {log} as of {as_of} ({kept}; snapshots older than "
            "the topic's delete.retention.ms are expired)"
        )
    return found[-1]


def snapshot_at(table: Table, point: SnapshotPoint, name: str = "snapshot") -> Snapshot:
    """The snapshot `point` names: a snapshot id, or a time (the snapshot current then, by the table's snapshot
    log); one line naming the snapshots kept when it is expired, or before the oldest kept (`name` says which
    argument it was)."""
    if isinstance(point, dt.datetime):
        moment = time_ms(point)
    elif str(point).strip().lstrip("-").isdigit():
        moment = int(str(point).strip())
        found = table.snapshot_by_id(moment)
        if found is not None:
            return found
        if moment >= SNAPSHOT_ID_FROM:
            raise TableError(
                f"{name} {moment}: table {_name(table)} has no such snapshot (expired, or never one of it); "
                f"{kept_range(table)}"
            )
    else:
        parsed = iso_time_ms(str(point))
        if parsed is None:
            raise TableError(
                f"{name} {point!r}: expected a snapshot id, milliseconds since the epoch, or an ISO-8601 time "
                "such as 2026-12-07T10:00:00Z"
            )
        moment = parsed
    then = [e for e in table.metadata.snapshot_log if e.timestamp_ms <= moment]
    found = table.snapshot_by_id(then[-1].snapshot_id) if then else None
    if found is None:
        raise TableError(
            f"{name} {point} ({iso_time(moment)}): before the oldest snapshot table {_name(table)} keeps; "
            f"{kept_range(table)}"
        )
    return found


def kept_range(table: Table) -> str:
    """The snapshots a table keeps, oldest and newest, as an error names them."""
    kept = sorted(table.snapshots(), key=lambda s: s.timestamp_ms)
    if not kept:
        return "it has no snapshot"
    first, last = kept[0], kept[-1]
    return (
        f"it keeps {len(kept)} snapshot(s), from {iso_time(first.timestamp_ms)} (snapshot {first.snapshot_id}) to "
        f"{iso_time(last.timestamp_ms)} (snapshot {last.snapshot_id}); older ones expire after the topic's "
        "delete.retention.ms"
    )


def iso_time(ms: int) -> str:
    """A time in milliseconds since the epoch as ISO-8601 UTC text."""
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _name(table: Table) -> str:
    return ".".join(table.name())


def scan(
    table: Table,
    snapshot_id: int | None = None,
    partition: int | None = None,
    limit: int | None = None,
    partitions: list[int] | None = None,
) -> pa.Table:
    """Rows of the table (of one partition, or of `partitions`, when given) at a snapshot (the current one by
    default), by partition and key."""
    from pyiceberg.expressions import AlwaysTrue, BooleanExpression

    row_filter: BooleanExpression = AlwaysTrue()
    if partition is not None:
        row_filter = partitions_filter([partition])
    elif partitions:
        row_filter = partitions_filter(partitions)
    if limit is None:
        return _by_partition_and_key(table.scan(row_filter=row_filter, snapshot_id=snapshot_id).to_arrow())
    # a scan's own limit takes the first rows of whichever files it reads first (the newest): the first
    # `limit` rows in order are the lowest partitions' lowest keys, so the partitions are read in order,
    # each whole (its keys sorted), until `limit` rows are found
    found: list[pa.Table] = []
    wanted = limit
    for p in _partitions(table, row_filter, snapshot_id):
        if wanted <= 0:
            break
        rows = table.scan(row_filter=partitions_filter([p]), snapshot_id=snapshot_id).to_arrow()
        found.append(_by_partition_and_key(rows).slice(0, wanted))
        wanted -= len(found[-1])
    return pa.concat_tables(found) if found else table.scan(limit=0, snapshot_id=snapshot_id).to_arrow()


def _by_partition_and_key(rows: pa.Table) -> pa.Table:
    return rows.sort_by([("partition", "ascending"), ("key", "ascending")])


def _partitions(table: Table, row_filter, snapshot_id: int | None) -> list[int]:
    """The log partitions that have data files in the scan, ascending (from the manifests: no data read)."""
    found = set()
    for task in table.scan(row_filter=row_filter, snapshot_id=snapshot_id).plan_files():
        spec = table.specs()[task.file.spec_id]
        position = next(i for i, f in enumerate(spec.fields) if f.name == "partition")
        found.add(task.file.partition[position])
    return sorted(found)
