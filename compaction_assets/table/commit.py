"""One log's change to its topic's table as one Iceberg snapshot, exactly once.

Every snapshot records, in its summary, the manifest version and offsets of every log of the topic it
reflects (`compaction.logs`, carried from snapshot to snapshot), and which log it committed. A run reads
the current snapshot first: a log whose recorded version is already the manifest's commits nothing (a
re-run), and one behind it (a run killed between its cleaning and its commit, or a table that missed a
version) is brought to the manifest's latest state by the next run, whatever happened in between.

What changed is found by comparing the table's live rows of the log (key, offset, and where each lies)
with the log's latest state, by key: a key whose winning offset differs, is new, or is gone was touched.
The commit appends the touched keys' new rows and masks their old rows with position-delete files
(merge-on-read, delta.py), so it writes about the change's bytes, not the table's; rewrite.py rewrites a
bucket whose deletes pile up. Several logs of a topic commit in one snapshot (`commit_logs`: a batch's
logs of one topic). Commits of the topic's partitions from concurrent processes are optimistic: a commit
that lost the race re-reads the table and tries again.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets import settings
from compaction_assets.state.latest_state import latest_state_table
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import TOPIC_PROPERTY, TableError, _first_line, identifier, locate, open_catalog
from compaction_assets.table.delta import live_rows, plan_by_partition, row_delta, write_position_deletes
from compaction_assets.table.expiry import ExpiryResult, expire
from compaction_assets.table.rewrite import RewriteResult, rewrite
from compaction_assets.table.schema import SCHEMA_ID_PROPERTY, check_owned, conform, new_table_layout, table_rows
from compaction_assets.topics.config import TopicConfig

LOGS = "compaction.logs"  # JSON {log: {"version", "log_start_offset", "log_end_offset"}}
LOG = "compaction.log"  # the log this snapshot committed
LOG_VERSION = "compaction.log-version"
ROWS_ADDED = "compaction.rows-added"
ROWS_DELETED = "compaction.rows-deleted"
MAX_ATTEMPTS = 30
# A commit that lost a race is redone here from the new current snapshot (its marks included), never
# rebased by pyiceberg onto it (which would carry the older marks forward).
TABLE_PROPERTIES = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "commit.retry.num-retries": "0",
}


@dataclass(frozen=True)
class LogMark:
    """What a snapshot reflects of one log: its manifest version and offsets."""

    version: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class CommitResult:
    """What one log's commit to its topic's table did (a commit of many logs has one each, one snapshot)."""

    identifier: str
    log: str
    log_version: int
    committed: bool  # False: the table already reflected this version (nothing written)
    snapshot_id: int | None
    rows_added: int = 0  # keys new or updated
    rows_deleted: int = 0  # keys gone (tombstoned, or lost to a remembered delete)
    files_removed: int = 0  # by the rewrite of due buckets after the commit (rewrite.py)
    files_added: int = 0  # data files
    delete_files_added: int = 0  # position-delete files masking the changed keys' old rows
    bytes_written: int = 0
    attempts: int = 1
    log_versions: dict[str, int] = field(default_factory=dict)
    expiry: ExpiryResult | None = None
    rewrite: RewriteResult | None = None


@dataclass(frozen=True)
class LogCommit:
    """One log to commit: its handle, topic config and manifest (the current one when None), and its
    latest state at that manifest when the caller built it already (built here when None)."""

    handle: LogHandle
    config: TopicConfig
    manifest: Manifest | None = None
    state: pa.Table | None = None


@dataclass(frozen=True)
class _Change:
    """A log partition's change against the table: the old rows to mask, the keys whose rows to append."""

    masks: list[tuple[object, pa.Array]]  # (data file, positions)
    appended: pa.Array  # keys new or updated
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
        raise TableError(
            f"table {ident} holds topic {owner!r}, not {topic!r}: both names map to it (each '.' "
            "of a topic name becomes '_'); set COMPACTION_TABLE_NAMESPACE apart for one of them"
        )
    check_owned(table, ident)
    return table


def _diff(table, tasks: list, state: pa.Table) -> _Change:
    """The keys whose live row in the table (in the partition's file scan `tasks`) is not the latest
    state's (by winning offset), new or gone."""
    if not tasks:
        return _Change([], state.column("key").combine_chunks(), len(state), 0)
    live = live_rows(table, tasks)
    mine = pa.table({"key": state.column("key"), "s": state.column("offset")})
    theirs = live.rows.rename_columns(["key", "t", "file", "pos"])
    joined = mine.join(theirs, keys="key", join_type="full outer")
    changed = joined.filter(pc.fill_null(pc.not_equal(joined.column("s"), joined.column("t")), True))
    present = pc.is_valid(changed.column("s"))
    stale = changed.filter(pc.is_valid(changed.column("t"))).sort_by("file")
    files = stale.column("file").to_numpy()
    bounds = np.flatnonzero(np.diff(files)) + 1 if len(files) else []
    masks = [
        (live.files[int(files[i])], stale.column("pos").slice(i, j - i).combine_chunks())
        for i, j in zip([0, *bounds], [*bounds, len(files)])
        if len(files)
    ]
    added = pc.sum(present.cast(pa.int64())).as_py() or 0
    return _Change(masks, changed.filter(present).column("key").combine_chunks(), added, len(changed) - added)


def state_at(handle: LogHandle, config: TopicConfig, manifest: Manifest, state: pa.Table | None = None) -> pa.Table:
    """The log's latest state at `manifest`: `state` when built already, else built here with Arrow, or one
    line when the log is past COMPACTION_TABLE_MAX_STATE_BYTES (it needs about four times its visible bytes
    here; no Spark path commits a table yet)."""
    if state is not None:
        return state
    bound = settings.current().tables.max_state_bytes
    if manifest.total_size > bound:
        raise TableError(
            f"log {handle.name}: its visible records ({manifest.total_size / 2**20:.0f} MiB) are "
            f"past the {bound / 2**20:.0f} MiB a table commit builds in one process "
            "(COMPACTION_TABLE_MAX_STATE_BYTES); its topic's table is not committed "
            "(docs/table.md, Costs and limits)"
        )
    return latest_state_table(handle, config, manifest)


def commit_log(
    handle: LogHandle,
    config: TopicConfig,
    *,
    manifest: Manifest | None = None,
    now: int | None = None,
    state: pa.Table | None = None,
) -> CommitResult:
    """Bring the log's rows of its topic's table to the log's latest state (`state`, when built already for
    `manifest`) in one snapshot (none when the table already reflects this manifest version), then rewrite
    due buckets and expire old snapshots."""
    return commit_logs([LogCommit(handle, config, manifest, state)], now=now)[0]


def commit_logs(logs: list[LogCommit], *, now: int | None = None, maintain: bool = True) -> list[CommitResult]:
    """Bring the rows of several logs of one topic to their latest states in one snapshot (one optimistic
    commit, redone from the new current snapshot when another won the race), then, with `maintain`,
    rewrite their due buckets and expire old snapshots; a result per log, in order."""
    from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError, ValidationException

    topics = {parse_log_name(item.handle.name)[0] for item in logs}
    if len(topics) != 1:
        raise TableError(f"one commit is of one topic's logs, not of {sorted(topics)}")
    topic = topics.pop()
    unique = list({item.handle.name: item for item in logs}.values())  # a log queued twice commits once
    if len(unique) < len(logs):
        by_name = {r.log: r for r in commit_logs(unique, now=now, maintain=maintain)}
        return [by_name[item.handle.name] for item in logs]
    location = locate(logs[0].handle.st)
    catalog = open_catalog(location)
    ident = identifier(location, topic)
    manifests = {item.handle.name: item.manifest or item.handle.manifest() for item in logs}
    states: dict[str, pa.Table] = {}
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            table = _load(catalog, ident, topic)
            marks = marks_of(table.current_snapshot()) if table is not None else {}
            behind = [
                item
                for item in logs
                if marks.get(item.handle.name) is None
                or marks[item.handle.name].version < manifests[item.handle.name].version
            ]
            for item in behind:
                if item.handle.name not in states:
                    # the caller's state is the one at its own manifest only
                    given = item.state if item.manifest is not None else None
                    states[item.handle.name] = state_at(item.handle, item.config, manifests[item.handle.name], given)
            done = (
                _commit_once(catalog, table, ident, location.buckets, behind, manifests, states, marks, attempt)
                if behind
                else {}
            )
            break
        except (CommitFailedException, TableAlreadyExistsError, ValidationException) as exc:
            last = exc
        except TableError:
            raise
        except Exception as exc:
            if "locked" not in str(exc).lower():  # SQLite's writer lock: another process commits now
                raise TableError(f"table {ident}: {_first_line(exc)}") from None
            last = exc
        time.sleep(random.uniform(0.02, 0.1) * min(attempt, 10))
    else:
        raise TableError(
            f"table {ident}: {MAX_ATTEMPTS} commits of {', '.join(manifests)} lost to concurrent "
            f"ones ({_first_line(last)}); run again"
        )
    return _maintained(catalog, ident, logs, done, attempt, now, maintain)


def _maintained(
    catalog,
    ident: str,
    logs: list[LogCommit],
    done: dict[str, CommitResult],
    attempt: int,
    now: int | None,
    maintain: bool,
) -> list[CommitResult]:
    """The results, after rewriting the logs' due buckets and expiring what the topic's deadlines allow
    (unless not `maintain`)."""
    table = catalog.load_table(ident)
    now_ms = now if now is not None else int(time.time() * 1000)
    retention = min(item.config.delete_retention_ms for item in logs)
    current = table.current_snapshot()
    marks = marks_of(current)
    carried = (
        {LOGS: current.summary.additional_properties[LOGS]} if LOGS in current.summary.additional_properties else {}
    )
    rewritten, expired = RewriteResult(), None
    if maintain:
        rewritten = rewrite(table, [parse_log_name(item.handle.name)[1] for item in logs], now_ms, retention, carried)
        if rewritten.snapshot_id is not None:
            table = catalog.load_table(ident)
        expired = expire(table, now_ms, retention, failed_attempts=attempt > 1)
    versions = {k: v.version for k, v in marks.items()}
    out = []
    for item in logs:
        name = item.handle.name
        r = done.get(name) or CommitResult(
            ident, name, marks[name].version, False, current.snapshot_id, attempts=attempt, log_versions=versions
        )
        out.append(
            replace(
                r,
                expiry=expired,
                rewrite=rewritten,
                files_removed=rewritten.files_removed,
                snapshot_id=rewritten.snapshot_id or r.snapshot_id,
            )
        )
    return out


def _commit_once(
    catalog,
    table,
    ident: str,
    buckets: int,
    logs: list[LogCommit],
    manifests: dict[str, Manifest],
    states: dict[str, pa.Table],
    marks: dict[str, LogMark],
    attempt: int,
) -> dict[str, CommitResult]:
    """One attempt: each log's changed rows appended and their old rows masked, in one snapshot."""
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    topic, _ = parse_log_name(logs[0].handle.name)
    if table is None:
        first = logs[0].handle
        iceberg, spec = new_table_layout(
            table_rows(first, states[first.name].slice(0, 0), parse_log_name(first.name)[1]).schema, buckets
        )
        tx = catalog.create_table_transaction(
            ident,
            schema=iceberg,
            partition_spec=spec,
            properties={TOPIC_PROPERTY: topic, SCHEMA_ID_PROPERTY: "0", **TABLE_PROPERTIES},
        )
    else:
        tx = table.transaction()
    io = tx._table.io
    written: dict[str, tuple[_Change, list, list]] = {}
    plan = plan_by_partition(table, [parse_log_name(item.handle.name)[1] for item in logs])
    for item in logs:
        name, partition = item.handle.name, parse_log_name(item.handle.name)[1]
        state = states[name]
        change = _diff(table, plan.get(partition, []), state)
        rows = conform(
            tx, table_rows(item.handle, state.filter(pc.is_in(state.column("key"), change.appended)), partition), ident
        )
        data = list(_dataframe_to_data_files(table_metadata=tx.table_metadata, df=rows, io=io)) if len(rows) else []
        deletes = [write_position_deletes(io, f, positions) for f, positions in change.masks]
        written[name] = (change, data, deletes)
        m = manifests[name]
        marks = {**marks, name: LogMark(m.version, m.log_start_offset, m.log_end_offset)}
    props = {
        LOGS: json.dumps({k: v.__dict__ for k, v in sorted(marks.items())}, separators=(",", ":")),
        LOG: ",".join(written),
        LOG_VERSION: ",".join(str(manifests[n].version) for n in written),
        ROWS_ADDED: str(sum(c.added for c, _, _ in written.values())),
        ROWS_DELETED: str(sum(c.deleted for c, _, _ in written.values())),
    }
    row_delta(tx, props, [f for _, data, deletes in written.values() for f in data + deletes], set()).commit()
    snapshot_id = tx.commit_transaction().current_snapshot().snapshot_id
    versions = {k: v.version for k, v in marks.items()}
    return {
        name: CommitResult(
            ident,
            name,
            manifests[name].version,
            True,
            snapshot_id,
            rows_added=change.added,
            rows_deleted=change.deleted,
            files_added=len(data),
            delete_files_added=len(deletes),
            bytes_written=sum(f.file_size_in_bytes for f in data + deletes),
            attempts=attempt,
            log_versions=versions,
        )
        for name, (change, data, deletes) in written.items()
    }
