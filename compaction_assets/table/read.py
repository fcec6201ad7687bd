"""Reading a topic's table: its snapshots with the log versions each reflects, and time travel."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pyarrow as pa

from compaction_assets.store.fs import Storage
from compaction_assets.table.catalog import TableError, identifier, locate, open_catalog
from compaction_assets.table.schema import partitions_filter
from compaction_assets.table.summary import LOG, ROWS_ADDED, ROWS_DELETED, marks_of

if TYPE_CHECKING:
    from pyiceberg.table import Table

TIME_FROM_MS = 10**11  # an --as-of integer at least this is milliseconds since the epoch; below, a log version


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
    """The topic's table and its identifier; one line when the topic has none yet."""
    from pyiceberg.exceptions import NoSuchTableError

    location = locate(store)
    ident = identifier(location, topic)
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
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise TableError(
            f"--as-of {text!r}: expected a log version, milliseconds since the epoch, or an "
            "ISO-8601 time such as 2026-11-26T10:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return "time", int(moment.timestamp() * 1000)


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
