"""The tables follow the logs (docs/table.md, Freshness): `append`, `ingest`, `clean`, `roll` and
`set-log-start` commit the topic's table before they return, no cleaning needed; COMPACTION_TABLES=0 leaves
it behind and the next commit catches up; the lag (records, ms) in `describe`, `logs` and `table show`."""

from __future__ import annotations

import json

from compaction_assets.cli import main
from compaction_assets.store.log_store import wall_ms
from compaction_assets.table.commit.commit import LogCommit
from compaction_assets.table.follow import TABLES_OFF, follow_logs
from compaction_assets.table.reading.lag import lags
from compaction_assets.table.reading.read import history, open_table
from tests.table.helpers import CFG, log_state, put, table_state


def cli(capsys, *args) -> tuple[int, dict | list, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def write(path, rows) -> str:
    path.write_text("".join(json.dumps({"timestamp": 1, **r}) + "\n" for r in rows))
    return str(path)


def values(handle) -> dict:
    return {k: v for k, (v, _) in table_state(handle).items()}


def test_append_commits_the_table_before_it_returns(store, tmp_path, capsys):
    first = write(tmp_path / "1.jsonl", [{"key": "a", "value": "1", "timestamp": 1}, {"key": "b", "value": "2"}])
    code, out, err = cli(capsys, "--store", store.location, "append", "users-0", first)
    assert code == 0 and out["table"]["committed"] and out["table"]["log_version"] == 1
    assert out["table"]["table"] == "compaction.users" and out["table"]["rows_added"] == 2
    assert "users-0: table compaction.users at log version 1 (2 rows added, 0 deleted, 0 old rows masked)" in err
    second = write(tmp_path / "2.jsonl", [{"key": "a", "value": "3", "timestamp": 2}, {"key": "b", "value": None}])
    code, out, _ = cli(capsys, "--store", store.location, "append", "users-0", second)
    assert (out["table"]["rows_added"], out["table"]["rows_deleted"]) == (1, 1)
    h = store.log("users-0")
    assert values(h) == {b"a": b"3"} and h.manifest().last_cleaning is None  # no cleaning ran


def test_ingest_commits_each_topic_once(store, tmp_path, capsys):
    landing = tmp_path / "landing"
    for log in ("users-0", "users-1", "orders-0"):
        topic, partition = log.rsplit("-", 1)
        folder = landing / topic / f"partition={partition}"
        folder.mkdir(parents=True)
        write(folder / "a.jsonl", [{"key": "k", "value": log, "timestamp": 1}])
    code, out, _ = cli(capsys, "--store", store.location, "ingest", "--landing", str(landing))
    assert code == 0 and {log: doc["table"]["committed"] for log, doc in out.items()} == dict.fromkeys(out, True)
    assert values(store.log("users-1")) == {b"k": b"users-1"}
    users, _ = open_table(store.log("users-0").st, "users")
    [snapshot] = history(users)  # the topic's two logs in one snapshot
    assert snapshot.log_versions == {"users-0": 1, "users-1": 1}


def test_clean_commits_the_table_eligible_or_not(store, spark, capsys):
    h = store.log("users-0")
    put(h, {"a": "1", "b": "2"})
    put(h, {"a": "3", "b": None}, ts=2)  # no table yet: written through the log layer only
    code, out, _ = cli(capsys, "--store", store.location, "clean", "users-0", "--force")
    assert code == 0 and out[0]["table"]["committed"] and out[0]["table"]["log_version"] == h.manifest().version
    assert table_state(h) == log_state(h)
    code, out, _ = cli(capsys, "--store", store.location, "clean", "users-0")  # not eligible: nothing cleaned
    assert code == 0 and out[0]["table"]["committed"] is False  # the table already reflects the version


def test_set_log_start_and_roll_reach_the_table(store, tmp_path, capsys):
    rows = [{"key": k, "value": k.upper(), "timestamp": 1} for k in ("a", "b", "c")]
    cli(capsys, "--store", store.location, "append", "users-0", write(tmp_path / "1.jsonl", rows))
    code, out, _ = cli(capsys, "--store", store.location, "roll", "users-0")
    assert code == 0 and out["table"]["log_version"] == store.log("users-0").manifest().version
    code, out, _ = cli(capsys, "--store", store.location, "set-log-start", "users-0", "2", "--confirm")
    assert code == 0 and out["table"]["committed"] and out["table"]["rows_deleted"] == 2
    assert values(store.log("users-0")) == {b"c": b"C"}


def test_opted_out_the_table_stays_behind_and_the_next_commit_catches_up(store, tmp_path, capsys, monkeypatch):
    loc = store.location
    cli(capsys, "--store", loc, "append", "users-0", write(tmp_path / "1.jsonl", [{"key": "a", "value": "1"}]))
    committed_at = wall_ms()
    # a bulk load: two appends, no commit (by the variable, then by the command's flag)
    for n, opt_out in ((2, []), (3, ["--no-table"])):
        if not opt_out:
            monkeypatch.setenv("COMPACTION_TABLES", "0")
        path = write(tmp_path / f"{n}.jsonl", [{"key": "a", "value": str(n)}, {"key": f"k{n}", "value": "x"}])
        code, out, _ = cli(capsys, "--store", loc, "append", "users-0", path, *opt_out)
        monkeypatch.delenv("COMPACTION_TABLES", raising=False)
        assert code == 0 and out["table"] == {"skipped": "tables are off (COMPACTION_TABLES, or the command's opt-out)"}
    h = store.log("users-0")
    assert values(h) == {b"a": b"1"}
    later = committed_at + 120_000
    code, out, _ = cli(capsys, "--store", loc, "describe", "users-0", "--now", str(later))
    lag = out["table"]
    assert (lag["log_version"], lag["table_log_version"], lag["lag_records"]) == (3, 1, 4)
    version_2 = h.manifest_version(2).committed_ms
    assert lag["lag_ms"] == later - version_2 and lag["late"] and lag["freshness_ms"] == 60_000
    code, out, _ = cli(capsys, "--store", loc, "logs", "--table-lag", "--now", str(later))
    assert (out[0]["table_lag_records"], out[0]["table_lag_ms"], out[0]["table_late"]) == (4, later - version_2, True)
    code, out, _ = cli(capsys, "--store", loc, "--now", str(version_2 + 1000), "table", "show", "users")
    assert out["lag"]["users-0"]["lag_ms"] == 1000 and out["lag"]["users-0"]["late"] is False
    cli(capsys, "--store", loc, "append", "users-0", write(tmp_path / "4.jsonl", [{"key": "z", "value": "z"}]))
    assert values(h) == {b"a": b"3", b"k2": b"x", b"k3": b"x", b"z": b"z"}  # all three appends' records
    code, out, _ = cli(capsys, "--store", loc, "describe", "users-0", "--now", str(later))
    assert (out["table"]["lag_records"], out["table"]["lag_ms"], out["table"]["late"]) == (0, 0, False)


def test_following_an_unchanged_log_builds_nothing_and_commits_nothing(store):
    h = store.log("users-0")
    put(h, {"a": "1"})
    assert follow_logs([LogCommit(h, CFG)], enabled=False).skipped == TABLES_OFF
    first = follow_logs([LogCommit(h, CFG)])
    assert first.result_of("users-0").committed and not first.errors
    table, _ = open_table(h.st, "users")
    snapshots = len(table.snapshots())
    again = follow_logs([LogCommit(h, CFG)]).result_of("users-0")
    assert again is not None and again.committed is False and again.snapshot_id == table.current_snapshot().snapshot_id
    table, _ = open_table(h.st, "users")
    assert len(table.snapshots()) == snapshots  # no snapshot, no upkeep
    assert lags([(h, CFG, h.manifest())], wall_ms())["users-0"].behind is False


def test_a_refused_commit_leaves_the_append_committed_and_says_so(store, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COMPACTION_TABLE_CATALOG_TYPE", "rest")  # a catalog that cannot be reached
    monkeypatch.setenv("COMPACTION_TABLE_CATALOG_URI", "http://127.0.0.1:9")
    path = write(tmp_path / "1.jsonl", [{"key": "a", "value": "1"}])
    code, out, err = cli(capsys, "--store", store.location, "append", "users-0", path)
    assert code == 0 and out["appended"] == 1 and "cannot reach the table rest catalog" in out["table"]["error"]
    assert "users-0: table not committed (" in err and "the next commit catches up" in err
