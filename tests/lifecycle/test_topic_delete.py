"""`compaction topic delete TOPIC`: the topic's logs, stored configuration, table (catalog entry and files)
and latest-state files are removed, and the landing files it had are never ingested again (a file landed
after the deletion creates the topic anew, as a producer re-creates a deleted Kafka topic). Without
`--yes` it says what it would remove and exits non-zero."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction_assets.cli import main
from compaction_assets.ingest.quarantine import Quarantine
from compaction_assets.table.catalog import locate, open_catalog
from tests.table.helpers import put


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def land(root: Path, topic: str, name: str, records: dict) -> None:
    folder = root / topic / "partition=0"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(
        "".join(json.dumps({"key": k, "value": v, "timestamp": 1}) + "\n" for k, v in records.items())
    )


@pytest.fixture
def landed(store, tmp_path, capsys, monkeypatch):
    """Two topics ingested from a landing area, with tables; users has a stored configuration and a
    latest-state folder."""
    landing = tmp_path / "landing"
    monkeypatch.setenv("COMPACTION_LATEST_STATE", str(tmp_path / "latest"))
    land(landing, "users", "0001.jsonl", {"a": "1"})
    land(landing, "users", "0002.jsonl", {"b": "2"})
    land(landing, "orders", "0001.jsonl", {"o": "1"})
    code, _, err = cli(capsys, "--store", store.location, "ingest", "--landing", str(landing))
    assert code == 0, err
    assert cli(capsys, "--store", store.location, "config", "set", "users", "min.cleanable.dirty.ratio=0.9")[0] == 0
    (tmp_path / "latest" / "users-0" / "version=2").mkdir(parents=True)
    return landing


def _tables(store) -> list[str]:
    location = locate(store.storage)
    return sorted(".".join(t) for t in open_catalog(location).list_tables(location.namespace))


def test_without_yes_it_says_what_it_would_remove_and_removes_nothing(store, landed, capsys):
    land(landed, "users", "0003.jsonl", {"c": "3"})  # landed, not ingested yet
    code, out, err = cli(capsys, "--store", store.location, "topic", "delete", "users", "--landing", str(landed))
    assert code == 1
    assert err == "error: topic 'users' not deleted: the above would be removed; run again with --yes to delete it\n"
    plan = json.loads(out)
    assert plan["topic"] == "users" and plan["deleted"] is False
    assert [(row["log"], row["files"] > 0) for row in plan["logs"]] == [("users-0", True)]
    assert plan["config_versions"] == 1 and plan["table"] == "compaction.users"
    assert plan["latest_state"] == [str(Path(store.location).parent / "latest" / "users-0")]
    assert plan["landing"]["files_left"] == 3 and plan["landing"]["never_ingested"] == 1
    assert "left in place" in plan["landing"]["what_happens"]
    assert store.log("users-0").exists() and _tables(store) == ["compaction.orders", "compaction.users"]


def test_with_yes_everything_of_the_topic_goes_and_the_next_ingest_does_not_bring_it_back(store, landed, capsys):
    land(landed, "users", "0003.jsonl", {"c": "3"})  # landed, never ingested: set aside with the others
    code, out, err = cli(
        capsys, "--store", store.location, "topic", "delete", "users", "--yes", "--landing", str(landed)
    )
    assert code == 0, err
    assert json.loads(out)["deleted"] is True
    assert not Path(store.location, "users-0").exists() and not Path(store.location, "_topics", "users").exists()
    assert not (Path(store.location).parent / "latest" / "users-0").exists()
    assert _tables(store) == ["compaction.orders"]
    code, out, _ = cli(capsys, "--store", store.location, "logs")
    assert [row["log"] for row in json.loads(out)] == ["orders-0"]
    code, out, err = cli(capsys, "--store", store.location, "ingest", "--landing", str(landed))
    assert code == 0 and json.loads(out)["orders-0"]["files"] == [], err
    assert "users-0" not in json.loads(out) and not store.log("users-0").exists()
    code, out, _ = cli(capsys, "--store", store.location, "config", "show", "users")
    assert json.loads(out)[0]["config_version"] == 0
    # a file landed after the deletion creates the topic anew, with that file's records only
    land(landed, "users", "0004.jsonl", {"d": "4"})
    code, out, err = cli(capsys, "--store", store.location, "ingest", "--landing", str(landed))
    assert code == 0 and json.loads(out)["users-0"]["files"] == ["0004.jsonl"], err
    code, out, _ = cli(capsys, "--store", store.location, "table", "scan", "users")
    assert [json.loads(line)["key"] for line in out.splitlines()] == ["d"]


def test_an_unknown_topic_is_one_line(store, landed, capsys):
    code, out, err = cli(
        capsys, "--store", store.location, "topic", "delete", "nosuch", "--yes", "--landing", str(landed)
    )
    assert code == 1 and out == "" and err == f"error: no topic 'nosuch' in the store at {store.location}\n"


def test_a_log_being_written_is_not_deleted(store, landed, capsys):
    handle = store.log("users-0")
    with handle.lock("clean", purpose="a cleaning"):
        code, _, err = cli(
            capsys, "--store", store.location, "topic", "delete", "users", "--yes", "--landing", str(landed)
        )
    assert code == 1 and err.count("\n") == 1 and "users-0" in err and "clean" in err, err
    assert handle.exists()


def test_topic_delete_without_tables_or_landing(store, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPACTION_LANDING", str(tmp_path / "no-landing"))
    put(store.log("events-0"), {"a": "1"})
    code, out, err = cli(capsys, "--store", store.location, "topic", "delete", "events", "--yes")
    assert code == 0, err
    done = json.loads(out)
    assert done["table"] is None and done["landing"]["files_left"] == 0
    assert not store.log("events-0").exists()


def test_the_files_set_aside_go_with_the_topic(store, landed, capsys):
    land(landed, "users", "0003.jsonl", {"c": "3"})
    code, _, err = cli(
        capsys,
        "--store",
        store.location,
        "landing",
        "quarantine",
        "users-0",
        "0003.jsonl",
        "--reason",
        "bad",
        "--landing",
        str(landed),
    )
    assert code == 0, err
    assert Quarantine(store.storage).of("users-0")
    code, _, err = cli(capsys, "--store", store.location, "topic", "delete", "users", "--yes", "--landing", str(landed))
    assert code == 0, err
    assert Quarantine(store.storage).of("users-0") == [] and Quarantine(store.storage).logs() == []
