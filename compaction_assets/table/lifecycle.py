"""A topic's table dropped (its catalog entry, then its files) or rebuilt (dropped, then every log of the
topic committed from its latest state in one snapshot): `compaction table drop|rebuild TOPIC`, and the table's
part of `compaction topic delete`. The logs are the source of truth and are not touched: a dropped table
is built again by the next commit, from the logs as they are then (its history is not: time travel starts
again from the first snapshot of the new table)."""

from __future__ import annotations

from dataclasses import dataclass

from compaction_assets.errors import first_line
from compaction_assets.store.fs import Storage
from compaction_assets.table.catalog import TOPIC_PROPERTY, TableError, identifier, locate, open_catalog
from compaction_assets.table.commit.commit import CommitResult, LogCommit, commit_logs


@dataclass(frozen=True)
class TableDrop:
    """What dropping a topic's table did."""

    table: str  # its identifier
    dropped: bool  # False: the topic had no table
    location: str | None = None  # where its files were
    files_removed: int = 0

    def as_document(self) -> dict[str, object]:
        return {
            "table": self.table,
            "dropped": self.dropped,
            "location": self.location,
            "files_removed": self.files_removed,
        }


@dataclass(frozen=True)
class TableRebuild:
    """What rebuilding a topic's table did: the drop, then the one commit of all its logs."""

    dropped: TableDrop
    committed: tuple[CommitResult, ...]


def drop_table(store: Storage, topic: str, configured: str | None) -> TableDrop:
    """Drop the topic's table (`configured`: its table.name): the catalog entry first, so that no reader
    finds an entry whose files are gone, then every file under the table's location. A table that holds
    another topic (its `compaction.topic` property) is refused, not dropped."""
    from pyiceberg.exceptions import NoSuchTableError

    location = locate(store)
    ident = identifier(location, topic, configured)
    catalog = open_catalog(location)
    try:
        table = catalog.load_table(ident)
    except NoSuchTableError:
        return TableDrop(ident, False)
    owner = table.properties.get(TOPIC_PROPERTY)
    if owner != topic:
        raise TableError(f"table {ident} holds topic {owner!r}, not {topic!r}: not dropped")
    where = table.location()
    try:
        catalog.drop_table(ident)
    except NoSuchTableError:
        return TableDrop(ident, False)  # dropped by another process meanwhile
    return TableDrop(ident, True, where, _remove_files(ident, where))


def _remove_files(ident: str, where: str) -> int:
    """Remove every file under the dropped table's location (its data, deletes, manifests and metadata);
    how many there were."""
    try:
        files = Storage.open(where)
        count = len(files.list_files_recursive(files.root))
        files.delete(files.root)
    except Exception as exc:  # the storage's own errors: one line, the entry is gone already
        raise TableError(
            f"table {ident}: dropped from the catalog, but its files under {where} were not all removed "
            f"({first_line(exc)}); remove them by hand"
        ) from None
    return count


def rebuild_table(topic: str, logs: list[LogCommit], now: int | None = None) -> TableRebuild:
    """Drop the topic's table, then commit every one of `logs` (all the topic's logs, with its configuration)
    from its latest state, in one snapshot."""
    if not logs:
        raise TableError(f"topic {topic!r}: no log to rebuild its table from")
    dropped = drop_table(logs[0].handle.st, topic, logs[0].config.table_name)
    return TableRebuild(dropped, tuple(commit_logs(logs, now=now)))
