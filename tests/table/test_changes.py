"""The changes feed of a topic's table (table/reading/feed.py, `compaction table changes`): for random histories of
a topic's logs (upserts and tombstones appended, cleanings, log starts moved, commits of some logs between,
buckets rewritten), for pairs of the table's snapshots, applying the changes to the older snapshot's rows
gives the newer one's exactly, each change is one (a delete's key was there, an upsert's row was not), and
reading the changed files only finds what scanning both snapshots whole finds. Then the command line and
its one-line errors. Real catalog, files and cleanings."""

from __future__ import annotations

import itertools
import json
import random
import time

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.cli import main
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log.writer import set_log_start
from compaction_assets.table import changes
from compaction_assets.table.catalog import TableError
from compaction_assets.table.commit.commit import LogCommit, commit_log, commit_logs
from compaction_assets.table.commit.expiry import ORPHAN_GRACE_MS
from compaction_assets.table.commit.rewrite import REWRITTEN
from compaction_assets.table.reading.feed import scan_changes
from compaction_assets.table.reading.read import history, iso_time, open_table, scan
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import write_lines
from tests.table.helpers import put

RETENTION_MS = 86_400_000
CFG = build_config({"delete.retention.ms": RETENTION_MS})
KEYS = [f"k{i:02d}" for i in range(24)]


def _rows(table, snapshot_id) -> dict[tuple[int, bytes], dict]:
    """{(partition, key): row} of the table at a snapshot."""
    return {(r["partition"], r["key"]): r for r in scan(table, snapshot_id).to_pylist()}


def _random_history(store, spark, seed: int) -> None:
    """Appends of upserts and tombstones to three logs of `users`, a cleaning, log starts moved, and after
    most steps a commit of some of the logs (some at a later clock, so that buckets are rewritten)."""
    rng = random.Random(seed)
    logs = [store.log(f"users-{p}") for p in range(3)]
    for h in logs:
        put(h, {k: f"first-{k}" for k in rng.sample(KEYS, 10)})
    wall = int(time.time() * 1000)
    cleaned = False
    for step in range(1, 16):
        h = rng.choice(logs)
        kind = rng.choices(["put", "clean", "start"], weights=[7, 1, 1])[0]
        if kind == "clean" and not cleaned:
            engine.run(h, CFG, wall, spark=spark, force=True)
            cleaned = True
        elif kind == "start":
            m = h.manifest()
            set_log_start(h, rng.randint(m.log_start_offset, m.log_end_offset))
        else:
            keys = rng.sample(KEYS, rng.randint(1, 8))
            put(h, {k: None if rng.random() < 0.3 else f"v{step}-{k}" for k in keys}, ts=step + 1)
        if rng.random() < 0.75:
            later = rng.random() < 0.25  # past half the retention: buckets with delete files are rewritten
            chosen = rng.sample(logs, rng.randint(1, 3))
            now = int(time.time() * 1000) + (RETENTION_MS // 2 + 1 if later else 0)
            commit_logs([LogCommit(c, CFG) for c in chosen], now=now)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_applying_the_changes_to_the_older_snapshot_gives_the_newer(store, spark, seed):
    _random_history(store, spark, seed)
    table, _ = open_table(store.storage, "users")
    snapshots = [s.snapshot_id for s in history(table)]
    assert any(REWRITTEN in (s.summary.additional_properties) for s in table.snapshots())  # rewrites covered
    rng = random.Random(seed)
    pairs = list(itertools.combinations_with_replacement(snapshots, 2))
    for older, newer in [*itertools.pairwise(snapshots), *rng.sample(pairs, min(25, len(pairs)))]:
        found = changes(table, older, newer)
        before, after = _rows(table, older), _rows(table, newer)
        applied = dict(before)
        for d in found.deletes.to_pylist():
            assert (d["partition"], d["key"]) in before and (d["partition"], d["key"]) not in after
            del applied[(d["partition"], d["key"])]
        for u in found.upserts.to_pylist():
            was = before.get((u["partition"], u["key"]))
            assert was is None or was["offset"] != u["offset"]
            applied[(u["partition"], u["key"])] = u
        assert applied == after, (older, newer)
        whole = scan_changes(table, older, newer)
        assert whole.upserts.equals(found.upserts) and whole.deletes.equals(found.deletes)
    from_nothing = changes(table, None)
    assert _rows(table, snapshots[-1]) == {(r["partition"], r["key"]): r for r in from_nothing.upserts.to_pylist()}


def test_what_changed_in_between_is_told_once_at_its_end(store):
    h = store.log("users-0")
    put(h, {"kept": "1", "gone": "1", "updated": "1", "same": "1"})
    first = commit_log(h, CFG).snapshot_id
    put(h, {"updated": "2", "passing": "1", "gone": None}, ts=2)
    commit_log(h, CFG)
    put(h, {"updated": "3", "passing": None, "kept": None}, ts=3)
    commit_log(h, CFG)
    put(h, {"kept": "back"}, ts=4)
    last = commit_log(h, CFG).snapshot_id
    found = changes("users", first, last, store=store.location)
    assert [(r["key"], r["value"]) for r in found.upserts.to_pylist()] == [(b"kept", b"back"), (b"updated", b"3")]
    assert found.deletes.to_pylist() == [{"partition": 0, "key": b"gone"}]
    assert (found.from_snapshot_id, found.to_snapshot_id) == (first, last)


def test_reading_the_change_reads_only_its_files(store):
    for p in range(4):
        put(store.log(f"users-{p}"), {f"k{i}": "1" for i in range(100)})
    commit_logs([LogCommit(store.log(f"users-{p}"), CFG) for p in range(4)])
    table, _ = open_table(store.storage, "users")
    first = table.current_snapshot().snapshot_id
    put(store.log("users-2"), {"k5": "2", "k6": None}, ts=2)
    commit_log(store.log("users-2"), CFG)
    table, _ = open_table(store.storage, "users")
    found = changes(table, first)
    assert (len(found.upserts), len(found.deletes)) == (1, 1)
    # the new rows' file and the one whose rows a delete file masked now; not the other partitions' three
    assert found.files_read == 2 and scan_changes(table, first, found.to_snapshot_id).files_read == 9


def test_upserts_carry_the_value_columns_of_the_newer_schema(tmp_path, store):
    config = build_config({"landing.format": "aiven"})
    root, h = tmp_path / "landing", store.log("users-0")
    write_lines(root / "users-0-0.jsonl", [{"key": {"id": 1}, "value": {"email": "a@x"}, "offset": 0, "timestamp": 1}])
    ingest(h, config, landing_logs(root)[0]["users-0"])
    first = commit_log(h, config).snapshot_id
    write_lines(
        root / "users-0-1.jsonl",
        [{"key": {"id": 1}, "value": {"email": "b@x", "plan": "pro"}, "offset": 1, "timestamp": 2}],
    )
    ingest(h, config, landing_logs(root)[0]["users-0"])
    commit_log(h, config)  # a new field: the schema evolves
    found = changes("users", first, store=store.location)
    [row] = found.upserts.to_pylist()
    assert (row["email"], row["plan"], row["offset"]) == ("b@x", "pro", 1) and len(found.deletes) == 0
    assert found.upserts.column_names == [f.name for f in open_table(store.storage, "users")[0].schema().fields]


def cli(capsys, *args) -> tuple[int, list[str], str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def test_the_command_prints_json_lines_and_a_summary(store, capsys):
    h = store.log("users-0")
    put(h, {"a": "1", "b": "2"})
    first = commit_log(h, CFG).snapshot_id
    put(h, {"a": "3", "b": None}, ts=2)
    commit_log(h, CFG)
    code, lines, err = cli(capsys, "--store", store.location, "table", "changes", "users", "--from", str(first))
    assert code == 0
    assert [json.loads(line) for line in lines] == [
        {"op": "upsert", "key": "a", "value": "3", "partition": 0, "offset": 2, "timestamp": 2, "headers": []},
        {"op": "delete", "partition": 0, "key": "b"},
    ]
    table, _ = open_table(store.storage, "users")
    last = table.current_snapshot()
    assert err.count("\n") == 1 and f"1 upserts, 1 deletes from snapshot {first} to snapshot {last.snapshot_id}" in err
    # times: epoch ms and ISO-8601, each meaning the snapshot current then
    at_first = str(history(table)[0].timestamp_ms)
    changes_at = ("table", "changes", "users", "--from")
    assert cli(capsys, "--store", store.location, *changes_at, at_first, "--to", at_first)[:2] == (0, [])
    after_last = iso_time(last.timestamp_ms + 1)
    code, again, _ = cli(capsys, "--store", store.location, *changes_at, at_first, "--to", after_last)
    assert code == 0 and again == lines


def test_errors_are_one_line(store, capsys):
    h = store.log("users-0")
    put(h, {"a": "1"})
    first = commit_log(h, CFG)
    put(h, {"a": "2"}, ts=2)
    second = commit_log(h, CFG)
    loc = store.location

    def error(*args: str) -> str:
        code, lines, err = cli(capsys, "--store", loc, "table", "changes", *args)
        assert code == 1 and lines == [] and err.count("\n") == 1
        return err

    assert "before the oldest snapshot table compaction.users keeps; it keeps 2 snapshot(s)" in error(
        "users", "--from", "2000-01-01T00:00:00Z"
    )
    assert "expected a snapshot id, milliseconds since the epoch, or an ISO-8601 time" in error("users", "--from", "x")
    assert "has no table compaction.orders" in error("orders", "--from", str(first.snapshot_id))
    assert "is newer than to snapshot" in error(
        "users", "--from", str(second.snapshot_id), "--to", str(first.snapshot_id)
    )
    later = int(time.time() * 1000) + RETENTION_MS + ORPHAN_GRACE_MS
    put(h, {"a": "3"}, ts=3)
    assert commit_log(h, CFG, now=later).expiry.snapshots_expired >= 2
    expired = error("users", "--from", str(first.snapshot_id))
    assert f"from {first.snapshot_id}: table compaction.users has no such snapshot (expired" in expired
    assert "it keeps 1 snapshot(s)" in expired
    with pytest.raises(TableError, match="has no such snapshot"):
        changes("users", second.snapshot_id, store=store.location)
