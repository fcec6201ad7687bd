"""One log's change to its topic's table as one Iceberg snapshot, exactly once.

Every snapshot records, in its summary, the manifest version and offsets of every log of the topic it
reflects (`compaction.logs`, carried from snapshot to snapshot), and which log it committed. A run reads
the current snapshot first: a log whose recorded version is already the manifest's commits nothing (a
re-run), and one behind it (a run killed between its cleaning and its commit, or a table that missed a
version) is brought to the manifest's latest state by the next run, whatever happened in between.

What changed is found by comparing the table's rows of the log (key and offset only) with the log's
latest state, by key: a key whose winning offset differs, is new, or is gone was touched. The table is
partitioned by the log's partition and a bucket of the key, so the commit replaces the data files of
the touched buckets only, with the latest state's rows of those buckets (copy-on-write, as pyiceberg
writes). Commits of the topic's partitions from concurrent processes are optimistic: a commit that lost
the race re-reads the table and tries again.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.latest_state import latest_state_table
from compaction_assets.log.config import TopicConfig
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.names import parse_log_name
from compaction_assets.log.store import LogHandle
from compaction_assets.table.catalog import (TOPIC_PROPERTY, TableError, identifier, locate, open_catalog,
                                             _first_line)
from compaction_assets.table.expiry import ExpiryResult, expire
from compaction_assets.table.schema import SCHEMA_ID_PROPERTY, check_owned, conform, new_table_layout, table_rows

LOGS = "compaction.logs"              # JSON {log: {"version", "log_start_offset", "log_end_offset"}}
LOG = "compaction.log"                # the log this snapshot committed
LOG_VERSION = "compaction.log-version"
ROWS_ADDED = "compaction.rows-added"
ROWS_DELETED = "compaction.rows-deleted"
MAX_ATTEMPTS = 30
# A commit that lost a race is redone here from the new current snapshot (its marks included), never
# rebased by pyiceberg onto it (which would carry the older marks forward).
TABLE_PROPERTIES = {"write.metadata.delete-after-commit.enabled": "true", "write.metadata.previous-versions-max": "20",
                    "commit.retry.num-retries": "0"}


@dataclass(frozen=True)
class LogMark:
    """What a snapshot reflects of one log: its manifest version and offsets."""
    version: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class CommitResult:
    """What one log's commit to its topic's table did."""
    identifier: str
    log: str
    log_version: int
    committed: bool                 # False: the table already reflected this version (nothing written)
    snapshot_id: int | None
    rows_added: int = 0             # keys new or updated
    rows_deleted: int = 0           # keys gone (tombstoned, or lost to a remembered delete)
    files_removed: int = 0
    files_added: int = 0
    bytes_written: int = 0
    attempts: int = 1
    log_versions: dict[str, int] = field(default_factory=dict)
    expiry: ExpiryResult | None = None


@dataclass(frozen=True)
class _Change:
    """The touched keys of one log against the table's rows, and their buckets."""
    touched: pa.Array
    added: int
    deleted: int


def marks_of(snapshot) -> dict[str, LogMark]:
    """The logs a snapshot reflects, from its summary ({} for none, or a snapshot the product did not write)."""
    raw = snapshot.summary.additional_properties.get(LOGS) if snapshot is not None else None
    return {log: LogMark(**mark) for log, mark in json.loads(raw).items()} if raw else {}


def _load(catalog, ident: str, topic: str):
    """The topic's table, or None; one line for a table of another topic or a schema changed by others."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        return None
    owner = table.properties.get(TOPIC_PROPERTY)
    if owner != topic:
        raise TableError(f"table {ident} holds topic {owner!r}, not {topic!r}: both names map to it (each '.' "
                         "of a topic name becomes '_'); set COMPACTION_TABLE_NAMESPACE apart for one of them")
    check_owned(table, ident)
    return table


def _diff(table, partition: int, state: pa.Table) -> _Change:
    """The keys whose row in the table is not the latest state's (by winning offset), new or gone."""
    from pyiceberg.expressions import EqualTo

    current = None
    if table is not None and table.current_snapshot() is not None:
        current = table.scan(row_filter=EqualTo("partition", partition), selected_fields=("key", "offset")).to_arrow()
    mine = pa.table({"key": state.column("key"), "s": state.column("offset")})
    if current is None or not len(current):
        return _Change(mine.column("key").combine_chunks(), len(mine), 0)
    theirs = pa.table({"key": current.column("key").cast(pa.binary()), "t": current.column("offset")})
    joined = mine.join(theirs, keys="key", join_type="full outer")
    changed = joined.filter(pc.fill_null(pc.not_equal(joined.column("s"), joined.column("t")), True))
    gone = pc.sum(pc.is_null(changed.column("s")).cast(pa.int64())).as_py() or 0
    return _Change(changed.column("key").combine_chunks(), len(changed) - gone, gone)


def _bucket_of(spec, keys: pa.Array) -> tuple[int, pa.Array]:
    """The position of the key bucket in the table's partition tuples, and each key's bucket."""
    from pyiceberg.types import BinaryType

    for i, pf in enumerate(spec.fields):
        if pf.name == "key_bucket":
            return i, pf.transform.pyarrow_transform(BinaryType())(keys.cast(pa.binary()))
    raise TableError("the table has no key_bucket partition field: it was not created by the product")


def commit_log(handle: LogHandle, config: TopicConfig, *, manifest: Manifest | None = None,
               now: int | None = None) -> CommitResult:
    """Bring the log's rows of its topic's table to the log's latest state in one snapshot (none when the
    table already reflects this manifest version), then expire what the topic's deadlines allow."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

    topic, partition = parse_log_name(handle.name)
    location = locate(handle.st)
    catalog = open_catalog(location)
    ident = identifier(location, topic)
    m = manifest or handle.manifest()
    state, result = None, None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            table = _load(catalog, ident, topic)
            marks = marks_of(table.current_snapshot()) if table is not None else {}
            mark = marks.get(handle.name)
            if mark is not None and mark.version >= m.version:
                result = CommitResult(ident, handle.name, mark.version, False, table.current_snapshot().snapshot_id,
                                      attempts=attempt, log_versions={k: v.version for k, v in marks.items()})
                break
            if state is None:
                state = latest_state_table(handle, config, m)
            result = _commit_once(catalog, table, ident, location.buckets, handle, partition, m, state, marks,
                                  attempt)
            break
        except (CommitFailedException, TableAlreadyExistsError, ValidationException) as exc:
            last = exc
        except TableError:
            raise
        except Exception as exc:
            if "locked" not in str(exc).lower():   # SQLite's writer lock: another process commits now
                raise TableError(f"table {ident}: {_first_line(exc)}") from None
            last = exc
        time.sleep(random.uniform(0.02, 0.1) * min(attempt, 10))
    else:
        raise TableError(f"table {ident}: {MAX_ATTEMPTS} commits of {handle.name} lost to concurrent ones "
                         f"({_first_line(last)}); run again")
    table = catalog.load_table(ident)
    done = expire(table, now if now is not None else int(time.time() * 1000),
                  config.delete_retention_ms, failed_attempts=result.attempts > 1)
    return replace(result, expiry=done)


def _commit_once(catalog, table, ident: str, buckets: int, handle: LogHandle, partition: int, m: Manifest,
                 state: pa.Table, marks: dict[str, LogMark], attempt: int) -> CommitResult:
    """One attempt: the touched buckets' files replaced by the state's rows of those buckets."""
    from pyiceberg.expressions import EqualTo
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    topic, _ = parse_log_name(handle.name)
    change = _diff(table, partition, state)
    if table is None:
        iceberg, spec = new_table_layout(table_rows(handle, state.slice(0, 0), partition).schema, buckets)
        tx = catalog.create_table_transaction(ident, schema=iceberg, partition_spec=spec, properties={
            TOPIC_PROPERTY: topic, SCHEMA_ID_PROPERTY: "0", **TABLE_PROPERTIES})
    else:
        tx = table.transaction()
    spec = tx.table_metadata.spec()
    position, touched_buckets = _bucket_of(spec, change.touched)
    hit = set(pc.unique(touched_buckets).to_pylist())
    old_files = [] if table is None else [
        t.file for t in table.scan(row_filter=EqualTo("partition", partition)).plan_files()
        if t.file.partition[position] in hit]
    _, state_buckets = _bucket_of(spec, state.column("key"))
    in_hit = pc.is_in(state_buckets, value_set=pa.array(sorted(hit), state_buckets.type))
    rows = table_rows(handle, state.filter(in_hit), partition)
    rows = conform(tx, rows, ident)
    marks = {**marks, handle.name: LogMark(m.version, m.log_start_offset, m.log_end_offset)}
    props = {LOGS: json.dumps({k: v.__dict__ for k, v in sorted(marks.items())}, separators=(",", ":")),
             LOG: handle.name, LOG_VERSION: str(m.version), ROWS_ADDED: str(change.added),
             ROWS_DELETED: str(change.deleted)}
    added = []
    with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
        for f in old_files:
            overwrite.delete_data_file(f)
        if len(rows):
            added = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows,
                                                  io=tx._table.io, write_uuid=overwrite.commit_uuid))
            for f in added:
                overwrite.append_data_file(f)
    committed = tx.commit_transaction()
    return CommitResult(ident, handle.name, m.version, True, committed.current_snapshot().snapshot_id,
                        rows_added=change.added, rows_deleted=change.deleted, files_removed=len(old_files),
                        files_added=len(added), bytes_written=sum(f.file_size_in_bytes for f in added),
                        attempts=attempt, log_versions={k: v.version for k, v in marks.items()})
