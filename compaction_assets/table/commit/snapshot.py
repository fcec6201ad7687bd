"""One snapshot of a topic's table committing several logs' changes: the table created when it has none,
each log's change written (its new rows as data files, its old rows masked by position-delete files), and
one row delta committing them all with a summary that records every log's mark.

commit.py decides which logs a snapshot commits and redoes it when another commit won the race; this
module writes one attempt. The table's properties turn pyiceberg's own retry off for that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.state.latest_state import empty_state
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import TOPIC_PROPERTY
from compaction_assets.table.commit.change import change_of, change_of_tail, plan_by_partition
from compaction_assets.table.commit.delta import row_delta, write_position_deletes
from compaction_assets.table.commit.route import SparkSource
from compaction_assets.table.commit.tail import Tail
from compaction_assets.table.schema import SCHEMA_ID_PROPERTY, conform, new_table_layout, table_rows
from compaction_assets.table.summary import LogMark, commit_summary

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import FileScanTask, Table, Transaction

# A commit that lost a race is redone by commit.py from the new current snapshot (its marks included),
# never rebased by pyiceberg onto it (which would carry the older marks forward).
RETRY_PROPERTY = "commit.retry.num-retries"
TABLE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    RETRY_PROPERTY: "0",
}


def with_retry_off(table: Table) -> Table:
    """`table`, its own retry off first when it is not (a table created before the product set it, or
    changed by others): pyiceberg reads it from the table it loaded, at every commit. A commit of
    properties only is never rebased, so setting it cannot stack anything."""
    if table.properties.get(RETRY_PROPERTY) == TABLE_PROPERTIES[RETRY_PROPERTY]:
        return table
    return table.transaction().set_properties({RETRY_PROPERTY: TABLE_PROPERTIES[RETRY_PROPERTY]}).commit_transaction()


@dataclass(frozen=True)
class TopicTable:
    """Where a topic's commit goes: the catalog, the table's identifier, the topic and its key buckets."""

    catalog: Catalog
    ident: str
    topic: str
    buckets: int


@dataclass(frozen=True)
class LogWrite:
    """One log's share of a snapshot: the data and position-delete files written for it, and its change's
    counts (change.py's `Change`: keys added, keys gone, old rows masked)."""

    data: list[DataFile]
    deletes: list[DataFile]
    added: int
    deleted: int
    masked: int


@dataclass(frozen=True)
class SnapshotWrite:
    """A committed snapshot: its id, the marks it records, and each log's write by name, in order."""

    snapshot_id: int
    marks: dict[str, LogMark]
    logs: dict[str, LogWrite]


def write_snapshot(
    target: TopicTable,
    table: Table | None,
    handles: list[LogHandle],
    manifests: dict[str, Manifest],
    states: dict[str, pa.Table | Tail | SparkSource],
    marks: dict[str, LogMark],
) -> SnapshotWrite:
    """Commit the logs of `handles` at `manifests` (their latest states, or their records since the table's
    marks: `states`) to the topic's table (created when `table` is None) in one snapshot, which records
    `marks` with theirs."""
    from compaction_assets.table.iceberg_internals import transaction_io

    tx = _transaction(target, table, handles[0], states[handles[0].name])
    io = transaction_io(tx)
    plan = plan_by_partition(table, [parse_log_name(handle.name)[1] for handle in handles])
    written: dict[str, LogWrite] = {}
    for handle in handles:
        name, partition = handle.name, parse_log_name(handle.name)[1]
        written[name] = _write_log(tx, io, table, target.ident, handle, states[name], plan.get(partition, []))
        m = manifests[name]
        marks = {**marks, name: LogMark(m.version, m.log_start_offset, m.log_end_offset, m.removals)}
    summary = commit_summary(
        marks,
        {name: manifests[name].version for name in written},
        sum(w.added for w in written.values()),
        sum(w.deleted for w in written.values()),
    )
    row_delta(tx, summary, [f for w in written.values() for f in w.data + w.deletes], set()).commit()
    committed = tx.commit_transaction().current_snapshot()
    assert committed is not None  # the transaction committed a snapshot
    return SnapshotWrite(committed.snapshot_id, marks, written)


def _transaction(
    target: TopicTable, table: Table | None, first: LogHandle, state: pa.Table | Tail | SparkSource
) -> Transaction:
    """A transaction on the topic's table, or creating it when there is none (its columns those of the
    first log's rows, partitioned by log and key bucket)."""
    if table is not None:
        return table.transaction()
    assert not isinstance(state, Tail)  # a log has a tail only against a table that reflects it
    empty = state.slice(0, 0) if isinstance(state, pa.Table) else empty_state()
    schema = table_rows(first, empty, parse_log_name(first.name)[1]).schema
    iceberg, spec = new_table_layout(schema, target.buckets)
    return target.catalog.create_table_transaction(
        target.ident,
        schema=iceberg,
        partition_spec=spec,
        properties={TOPIC_PROPERTY: target.topic, SCHEMA_ID_PROPERTY: "0", **TABLE_PROPERTIES},
    )


def _write_log(
    tx: Transaction,
    io: FileIO,
    table: Table | None,
    ident: str,
    handle: LogHandle,
    state: pa.Table | Tail | SparkSource,
    tasks: list[FileScanTask],
) -> LogWrite:
    """One log's change written, not committed: the rows of its new or updated keys as data files (in the
    table's schema, evolved for new value fields), the old rows of its changed keys masked by delete files."""
    from compaction_assets.table.iceberg_internals import write_data_files

    if isinstance(state, SparkSource):  # past the in-process bound: Spark tasks find and write the change
        from compaction_assets.table.commit.spark_change import write_with_spark

        done = write_with_spark(tx, table, ident, state, tasks)
        return LogWrite(done.data, done.deletes, done.added, done.deleted, done.masked)
    if isinstance(state, Tail):
        change, touched = change_of_tail(table, tasks, state.rows, state.keys), state.rows
    else:
        change = change_of(table, tasks, state)
        touched = state.filter(pc.is_in(state.column("key"), change.appended))
    rows = conform(tx, table_rows(handle, touched, parse_log_name(handle.name)[1]), ident)
    data = write_data_files(tx, rows, io)
    deletes = [write_position_deletes(io, f, positions) for f, positions in change.masks]
    return LogWrite(data, deletes, change.added, change.deleted, change.masked)
