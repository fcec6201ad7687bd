"""One log's change to its topic's table as one Iceberg snapshot, exactly once.

Every snapshot records, in its summary, the manifest version and offsets of every log of the topic it
reflects (table/summary.py), and which log it committed. A run reads the current snapshot first: a log whose
recorded version is already the manifest's commits nothing (a re-run), and one behind it (a run killed
between its cleaning and its commit, or a table that missed a version) is brought to the manifest's latest
state by the next run, whatever happened in between.

What changed is found by comparing the table's live rows of the log (key, offset, and where each lies)
with the log's latest state, by key (change.py). The commit appends the touched keys' new rows and masks
their old rows with position-delete files (merge-on-read, delta.py), so it writes about the change's bytes,
not the table's; rewrite.py rewrites a bucket whose deletes pile up. Several logs of a topic commit in one
snapshot (`commit_logs`: a batch's logs of one topic). Commits of the topic's partitions from concurrent
processes are optimistic: a commit that lost the race re-reads the table and tries again.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa

from compaction_assets.errors import CompactionError, first_line
from compaction_assets.state.latest_state import latest_state_table
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import TOPIC_PROPERTY, TableError, identifier, locate, open_catalog
from compaction_assets.table.commit.expiry import ExpiryResult, expire
from compaction_assets.table.commit.rewrite import RewriteResult, rewrite
from compaction_assets.table.commit.route import (
    GIVEN_ROUTE,
    SPARK,
    TAIL_ROUTE,
    Route,
    SparkSource,
    state_route,
)
from compaction_assets.table.commit.snapshot import LogWrite, TopicTable, with_retry_off, write_snapshot
from compaction_assets.table.commit.tail import Tail, tail_since
from compaction_assets.table.schema import check_owned
from compaction_assets.table.summary import LogMark, carried_marks, marks_of
from compaction_assets.topics.config import TopicConfig

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

MAX_ATTEMPTS = 30
Source: TypeAlias = pa.Table | Tail | SparkSource  # what brings a log's rows up (`_source`)


@dataclass(frozen=True)
class CommitResult:
    """What one log's commit to its topic's table did (a commit of many logs has one each, one snapshot)."""

    identifier: str
    log: str
    log_version: int
    committed: bool  # False: the table already reflected this version (nothing written)
    snapshot_id: int | None
    rows_added: int = 0  # keys new or updated: rows appended
    rows_deleted: int = 0  # keys gone (tombstoned, or lost to a remembered delete): no row any more
    # old rows masked by the position deletes: an updated key's old row and a gone key's row (so an update
    # commit adds a delete file with rows_deleted 0 and rows_masked 1)
    rows_masked: int = 0
    files_removed: int = 0  # by the rewrite of due buckets after the commit (rewrite.py)
    files_added: int = 0  # data files
    delete_files_added: int = 0  # position-delete files masking the changed keys' old rows
    bytes_written: int = 0
    # the log's records read to find the change: its records since the table's mark (`from_tail`,
    # table/commit/tail.py), else every visible record (its whole latest state built)
    records_read: int = 0
    from_tail: bool = False
    # how the change was found (route.py: "tail", "in-process" or "spark") and why, in words
    path: str = ""
    why: str = ""
    attempts: int = 1
    log_versions: dict[str, int] = field(default_factory=dict)
    expiry: ExpiryResult | None = None
    rewrite: RewriteResult | None = None

    def as_document(self) -> dict[str, object]:
        """What the commit did, as the commands that commit show it."""
        return {
            "table": self.identifier,
            "committed": self.committed,
            "snapshot_id": self.snapshot_id,
            "log_version": self.log_version,
            "rows_added": self.rows_added,
            "rows_deleted": self.rows_deleted,
            "rows_masked": self.rows_masked,
            "records_read": self.records_read,
            "bytes_written": self.bytes_written,
            "path": self.path,
            "why": self.why,
        }


@dataclass(frozen=True)
class LogCommit:
    """One log to commit: its handle, topic config and manifest (the current one when None), and its
    latest state at that manifest when the caller built it already (built here when None)."""

    handle: LogHandle
    config: TopicConfig
    manifest: Manifest | None = None
    state: pa.Table | None = None


def _load(catalog: Catalog, ident: str, topic: str) -> Table | None:
    """The topic's table (its own retry off), or None; one line for a table of another topic or a schema
    changed by others."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        return None
    owner = table.properties.get(TOPIC_PROPERTY)
    if owner != topic:
        raise TableError(
            f"table {ident} holds topic {owner!r}, not {topic!r}: both names map to it (each '.' of a topic "
            f"name becomes '_'); give one its own: `compaction config set {topic} table.name={_other_name(ident)}`"
        )
    check_owned(table, ident)
    return with_retry_off(table)


def _other_name(ident: str) -> str:
    """A table name to suggest beside the taken `ident`'s."""
    return ident.rsplit(".", 1)[-1] + "_2"


def state_at(
    handle: LogHandle, config: TopicConfig, manifest: Manifest, state: pa.Table | None = None
) -> pa.Table | None:
    """The log's latest state at `manifest`: `state` when built already, else built here with Arrow, or None
    when the log is past COMPACTION_TABLE_MAX_STATE_BYTES (Spark tasks find its change: route.py)."""
    if state is not None:
        return state
    if state_route(manifest).path == SPARK:
        return None
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
    unique = list({item.handle.name: item for item in logs}.values())  # a log queued twice commits once
    if len(unique) < len(logs):
        by_name = {r.log: r for r in commit_logs(unique, now=now, maintain=maintain)}
        return [by_name[item.handle.name] for item in logs]
    location = locate(logs[0].handle.st)
    topic = topics.pop()
    ident = identifier(location, topic, logs[0].config.table_name)
    target = TopicTable(open_catalog(location), ident, topic, location.buckets)
    manifests = {item.handle.name: item.manifest or item.handle.manifest() for item in logs}
    states: dict[str, Source] = {}
    last: Exception | None = None
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            done = _attempt(target, logs, manifests, states, attempt)
            break
        except (CommitFailedException, TableAlreadyExistsError, ValidationException) as exc:
            last = exc
        except CompactionError:  # the product's own error (the table's, a log's unreadable file) as it is
            raise
        except Exception as exc:
            if "locked" not in str(exc).lower():  # SQLite's writer lock: another process commits now
                raise TableError(f"table {target.ident}: {first_line(exc)}") from None
            last = exc
        time.sleep(random.uniform(0.02, 0.1) * min(attempt, 10))
    else:
        assert last is not None  # every attempt that did not commit kept its error
        raise TableError(
            f"table {target.ident}: {MAX_ATTEMPTS} commits of {', '.join(manifests)} lost to concurrent "
            f"ones ({first_line(last)}); run again"
        )
    return _maintained(target, logs, done, attempt, now, maintain)


def _attempt(
    target: TopicTable,
    logs: list[LogCommit],
    manifests: dict[str, Manifest],
    states: dict[str, Source],
    attempt: int,
) -> dict[str, CommitResult]:
    """One attempt, from the table's current snapshot: the logs it reflects behind their manifests committed
    (each by its records since the table's mark when those are its whole change, table/commit/tail.py, else by
    its latest state, built once and kept in `states` for the next attempt); nothing when none is behind."""
    table = _load(target.catalog, target.ident, target.topic)
    marks = marks_of(table.current_snapshot()) if table is not None else {}
    behind = [
        item
        for item in logs
        if marks.get(item.handle.name) is None or marks[item.handle.name].version < manifests[item.handle.name].version
    ]
    for item in behind:
        name = item.handle.name
        known = states.get(name)
        if known is None or (isinstance(known, Tail) and known.mark != marks.get(name)):
            states[name] = _source(item, manifests[name], marks.get(name))
    return _commit_once(target, table, behind, manifests, states, marks, attempt) if behind else {}


def _source(item: LogCommit, manifest: Manifest, mark: LogMark | None) -> Source:
    """What brings the log's rows up: the caller's latest state (at its own manifest), its records since the
    table's mark when they are the whole change, else its latest state built here, or Spark tasks' work past
    the in-process bound (route.py)."""
    given = item.state if item.manifest is not None else None
    if given is None:
        tail = tail_since(item.handle, item.config, manifest, mark)
        if tail is not None:
            return tail
    state = state_at(item.handle, item.config, manifest, given)
    return state if state is not None else SparkSource(item.handle, item.config, manifest)


def _route(item: LogCommit, source: Source, manifest: Manifest) -> Route:
    """Which way `source` found the log's change, and why."""
    if isinstance(source, Tail):
        return TAIL_ROUTE
    if isinstance(source, pa.Table) and item.state is not None and item.manifest is not None:
        return GIVEN_ROUTE
    return state_route(manifest)


def _maintained(
    target: TopicTable,
    logs: list[LogCommit],
    done: dict[str, CommitResult],
    attempt: int,
    now: int | None,
    maintain: bool,
) -> list[CommitResult]:
    """The results, after rewriting the logs' due buckets and expiring what the topic's deadlines allow
    (unless not `maintain`)."""
    table = target.catalog.load_table(target.ident)
    now_ms = now if now is not None else int(time.time() * 1000)
    retention = min(item.config.delete_retention_ms for item in logs)
    current = table.current_snapshot()
    assert current is not None  # the table was committed at least once
    marks = marks_of(current)
    rewritten, expired = RewriteResult(), None
    if maintain:
        partitions = [parse_log_name(item.handle.name)[1] for item in logs]
        rewritten = rewrite(table, partitions, now_ms, retention, carried_marks(current))
        if rewritten.snapshot_id is not None:
            table = target.catalog.load_table(target.ident)
        expired = expire(table, now_ms, retention, failed_attempts=attempt > 1)
    versions = {k: v.version for k, v in marks.items()}
    out = []
    for item in logs:
        name = item.handle.name
        r = done.get(name) or CommitResult(
            target.ident, name, marks[name].version, False, current.snapshot_id, attempts=attempt, log_versions=versions
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
    target: TopicTable,
    table: Table | None,
    logs: list[LogCommit],
    manifests: dict[str, Manifest],
    states: dict[str, Source],
    marks: dict[str, LogMark],
    attempt: int,
) -> dict[str, CommitResult]:
    """One attempt's commit: each log's changed rows appended and their old rows masked, in one snapshot."""
    snapshot = write_snapshot(target, table, [item.handle for item in logs], manifests, states, marks)
    versions = {k: v.version for k, v in snapshot.marks.items()}
    routes = {item.handle.name: _route(item, states[item.handle.name], manifests[item.handle.name]) for item in logs}
    return {
        name: replace(
            _result(target.ident, name, manifests[name].version, w, snapshot.snapshot_id, attempt, versions),
            records_read=_records_read(states[name], manifests[name]),
            from_tail=isinstance(states[name], Tail),
            path=routes[name].path,
            why=routes[name].why,
        )
        for name, w in snapshot.logs.items()
    }


def _records_read(source: Source, manifest: Manifest) -> int:
    """What finding a log's change read: its tail's records, or (a latest state) its visible records."""
    return source.records if isinstance(source, Tail) else sum(seg.records for seg in manifest.segments)


def _result(
    ident: str,
    name: str,
    version: int,
    written: LogWrite,
    snapshot_id: int,
    attempt: int,
    versions: dict[str, int],
) -> CommitResult:
    """What the commit did for one log it wrote."""
    files = written.data + written.deletes
    return CommitResult(
        ident,
        name,
        version,
        True,
        snapshot_id,
        rows_added=written.added,
        rows_deleted=written.deleted,
        rows_masked=written.masked,
        files_added=len(written.data),
        delete_files_added=len(written.deletes),
        bytes_written=sum(f.file_size_in_bytes for f in files),
        attempts=attempt,
        log_versions=versions,
    )
