"""The commit's correctness rests on pyiceberg's own retry being off for every topic table
(`commit.retry.num-retries=0`, table/commit/snapshot.py): a commit that lost the race must be redone from the
winner's snapshot by table/commit/commit.py, never rebased by pyiceberg, which would carry the older snapshot's
log marks (and the deletes computed against it) forward.

Every table the product creates carries the property, and a table that does not (made before the product
set it, or changed by others) carries it after the product's next commit. A lost race is forced, not
hoped for: the winner's commit is made first, the catalog is put back before it, and a SQLite trigger on
the catalog's row lands the winner at the moment the loser's commit replaces that row (the catalog then
refuses the loser, as when another process committed between its read and its write)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field

import pytest

from compaction_assets.table.catalog import locate, table_name
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.commit.group import TopicBatch
from compaction_assets.table.commit.snapshot import RETRY_PROPERTY
from compaction_assets.table.reading.read import history, open_table
from tests.table.helpers import CFG, catalog_of, log_state, put, table_state


def retry_of_every_table(handle) -> dict[str, str | None]:
    """The retry property of every table of the store's catalog, by identifier."""
    catalog = catalog_of(handle)
    namespace = locate(handle.st).namespace
    return {
        ".".join(ident): catalog.load_table(ident).properties.get(RETRY_PROPERTY)
        for ident in catalog.list_tables(namespace)
    }


def set_retry(handle, topic: str, value: str) -> None:
    """The table's retry property as a table made before the product set it, or changed by others, has it."""
    table, _ = open_table(handle.st, topic)
    table.transaction().set_properties({RETRY_PROPERTY: value}).commit_transaction()


def test_every_table_the_product_creates_or_loads_has_its_own_retry_off(store):
    users, orders, events = store.log("users-0"), store.log("orders-0"), store.log("events-0")
    for h in (users, orders, events):
        put(h, {f"k{i}": f"{h.name}-{i}" for i in range(20)})
    commit_log(users, CFG)  # created by one log's commit
    batch = TopicBatch(2**30)  # ... and by a batch's commit of its topics
    batch.add(orders, CFG)
    batch.add(events, CFG)
    batch.commit()
    assert retry_of_every_table(users) == {f"compaction.{t}": "0" for t in ("users", "orders", "events")}
    # a table without it, or with pyiceberg's default: the next commit that loads it sets it first
    set_retry(users, "users", "4")
    set_retry(orders, "orders", "4")
    put(users, {"k1": "changed"}, ts=2)
    assert commit_log(users, CFG).committed
    assert commit_log(orders, CFG).committed is False  # nothing to commit: loaded all the same
    assert retry_of_every_table(users) == {f"compaction.{t}": "0" for t in ("users", "orders", "events")}
    assert table_state(users) == log_state(users) and table_state(orders) == log_state(orders)


def metadata_location(db: str, name: str) -> str:
    with sqlite3.connect(db) as connection:
        [(location,)] = connection.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE table_name = ?", (name,)
        ).fetchall()
    return location


def files_under(folder: str) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(folder) for name in names}


@dataclass
class Loser:
    """A commit in a thread; its result or error."""

    thread: threading.Thread
    result: list = field(default_factory=list)


def start_commit(handle) -> Loser:
    loser = Loser(threading.Thread(target=lambda: None))

    def run() -> None:
        try:
            loser.result.append(commit_log(handle, CFG))
        except Exception as exc:
            loser.result.append(exc)

    loser.thread = threading.Thread(target=run, name="loser")
    loser.thread.start()
    return loser


def land_between_read_and_write(db: str, name: str, base: str, winner: str, warehouse: str, loser: Loser) -> bool:
    """Once the losing commit has read the table at `base` (its first data file written), hold the catalog
    (SQLite's exclusive lock: its commit's read or write then waits) and land the `winner` there; False when
    the loser's commit got through first."""
    before = files_under(warehouse)
    while not files_under(warehouse) - before:
        assert loser.thread.is_alive() or loser.result, "the losing commit ended without writing a file"
        if not loser.thread.is_alive():
            return False
        time.sleep(0.001)
    connection = sqlite3.connect(db, timeout=30, isolation_level=None)
    try:
        connection.execute("BEGIN EXCLUSIVE")
        landed = connection.execute(
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? "
            "WHERE table_name = ? AND metadata_location = ?",
            (winner, base, name, base),
        ).rowcount
        connection.execute("COMMIT")
    finally:
        connection.close()
    return landed == 1


@pytest.mark.parametrize("retry", [None, "4"], ids=["as-created", "created-without-it"])
def test_a_commit_that_loses_the_race_is_redone_from_the_winners_snapshot(store, monkeypatch, retry):
    """The winner's commit is made, the catalog put back before it; the loser's commit starts from there and,
    once it has read the table, the winner lands (as a second process committing at that moment). The
    catalog refuses the loser, whose commit is redone from the winner's snapshot: both logs' rows right,
    the winner's mark kept. Without the retry off (a table created without it), pyiceberg rebased the loser
    itself, from the older snapshot. The moment is found by watching the files; a loser that got through
    first is tried again, and a race must have been lost."""
    monkeypatch.setenv("COMPACTION_TABLE_BUCKETS", "16")  # a file a bucket: the loser writes many before its commit
    loser, winner = store.log("events-0"), store.log("events-1")
    put(loser, {f"k{i}": f"loser-{i}" for i in range(200)})
    put(winner, {f"k{i}": f"winner-{i}" for i in range(200)})
    commit_log(loser, CFG)
    commit_log(winner, CFG)
    if retry is not None:
        set_retry(winner, "events", retry)
    db, name = locate(store.storage).uri[len("sqlite:///") :], table_name("events")
    warehouse = os.path.join(store.storage.root, "_tables", "warehouse")
    for attempt in range(10):
        base = metadata_location(db, name)
        put(winner, {"k1": f"winner-changed-{attempt}", "k2": None}, ts=2 + attempt)
        won = commit_log(winner, CFG)
        assert won.committed
        winning = metadata_location(db, name)
        with sqlite3.connect(db) as connection:  # the catalog as before the winner's commit
            connection.execute("UPDATE iceberg_tables SET metadata_location = ? WHERE table_name = ?", (base, name))
        put(loser, {f"k{i}": f"loser-changed-{attempt}" for i in range(3, 200, 3)}, ts=2 + attempt)
        committing = start_commit(loser)
        forced = land_between_read_and_write(db, name, base, winning, warehouse, committing)
        committing.thread.join(300)
        [lost] = committing.result
        assert not isinstance(lost, Exception), lost
        if forced:
            break
        # the loser got through first: its snapshot replaced the winner's; the winner commits again
        assert commit_log(winner, CFG).committed
    assert forced, "no lost race in 10 tries"
    assert lost.committed and lost.attempts == 2, lost  # refused once, redone from the winner's snapshot
    table, _ = open_table(loser.st, "events")
    assert history(table)[-1].log_versions == {"events-0": loser.manifest().version, "events-1": won.log_version}
    assert table.current_snapshot().parent_snapshot_id == won.snapshot_id
    for h in (loser, winner):
        assert table_state(h) == log_state(h), h.name
    assert table.properties[RETRY_PROPERTY] == "0"
