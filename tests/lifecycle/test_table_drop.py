"""`compaction table drop TOPIC` (the catalog entry and the table's files) and `table rebuild TOPIC` (drop,
then commit every log of the topic from its latest state, in one snapshot)."""

from __future__ import annotations

import json
from pathlib import Path

from compaction_assets.cli import main
from compaction_assets.table.reading.read import open_table
from tests.table.helpers import log_state, put, table_state


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _table_folder(store, topic: str) -> Path:
    table, _ = open_table(store.storage, topic)
    return Path(table.location().removeprefix("file://"))


def test_drop_removes_the_catalog_entry_and_the_files(store, capsys):
    put(store.log("users-0"), {"a": "1"})
    put(store.log("users-1"), {"b": "2"})
    assert cli(capsys, "--store", store.location, "table", "commit")[0] == 0
    folder = _table_folder(store, "users")
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    code, out, err = cli(capsys, "--store", store.location, "table", "drop", "users")
    assert code == 0, err
    dropped = json.loads(out)
    assert dropped == {
        "table": "compaction.users",
        "dropped": True,
        "location": f"file://{folder}",
        "files_removed": len(files),
    }
    assert not folder.exists()
    code, _, err = cli(capsys, "--store", store.location, "table", "show", "users")
    assert code == 1 and "has no table compaction.users" in err
    code, out, err = cli(capsys, "--store", store.location, "table", "drop", "users")
    assert code == 1 and err == "error: topic 'users' has no table compaction.users (nothing to drop)\n"
    # the logs are untouched, and the next commit builds the table again
    assert cli(capsys, "--store", store.location, "table", "commit")[0] == 0
    assert table_state(store.log("users-1")) == log_state(store.log("users-1"))


def test_rebuild_commits_every_log_from_its_latest_state_in_one_snapshot(store, capsys):
    h0, h1 = store.log("users-0"), store.log("users-1")
    put(h0, {"a": "1", "b": "2"})
    assert cli(capsys, "--store", store.location, "table", "commit")[0] == 0
    put(h0, {"a": "3", "b": None}, ts=2)
    put(h1, {"c": "4"})
    assert cli(capsys, "--store", store.location, "table", "commit")[0] == 0
    table, _ = open_table(store.storage, "users")
    assert len(table.snapshots()) == 2
    code, out, err = cli(capsys, "--store", store.location, "table", "rebuild", "users")
    assert code == 0, err
    rebuilt = json.loads(out)
    assert rebuilt["dropped"]["dropped"] is True
    assert [(r["log"], r["committed"], r["rows_added"]) for r in rebuilt["committed"]] == [
        ("users-0", True, 1),
        ("users-1", True, 1),
    ]
    table, _ = open_table(store.storage, "users")
    assert len(table.snapshots()) == 1
    assert table_state(h0) == log_state(h0) and table_state(h1) == log_state(h1)


def test_rebuild_of_a_topic_without_a_table_builds_it(store, capsys):
    put(store.log("users-0"), {"a": "1"})
    code, out, err = cli(capsys, "--store", store.location, "table", "rebuild", "users")
    assert code == 0, err
    assert json.loads(out)["dropped"]["dropped"] is False
    assert table_state(store.log("users-0")) == log_state(store.log("users-0"))


def test_rebuild_of_a_topic_without_logs_is_refused(store, capsys):
    put(store.log("users-0"), {"a": "1"})
    code, _, err = cli(capsys, "--store", store.location, "table", "rebuild", "orders")
    assert (
        code == 1
        and err == "error: topic 'orders' has no log in the store at " + store.location + " (nothing to rebuild from)\n"
    )


def test_drop_refuses_a_table_that_holds_another_topic(store, capsys):
    put(store.log("users-0"), {"a": "1"})
    assert cli(capsys, "--store", store.location, "config", "set", "users", "table.name=people")[0] == 0
    assert cli(capsys, "--store", store.location, "table", "commit")[0] == 0
    put(store.log("people-0"), {"a": "1"})
    code, _, err = cli(capsys, "--store", store.location, "table", "drop", "people")
    assert code == 1 and err.count("\n") == 1 and "table compaction.people holds topic 'users', not 'people'" in err
    assert _table_folder(store, "users").exists()
