"""A topic's table: backfilled from a log's latest state, then one snapshot per log version appending the
touched keys' rows and masking their old ones (merge-on-read), buckets rewritten when masks pile up, many
logs in one snapshot, nothing on a re-run, structured values as columns."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.table.commit.commit import LogCommit, commit_log, commit_logs, marks_of
from compaction_assets.table.commit.rewrite import REWRITE_MAX_DATA_FILES
from compaction_assets.table.reading.read import history, open_table, scan
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import write_lines
from tests.table.helpers import CFG, data_files, log_state, put, table_state


def test_a_new_table_is_the_log_latest_state_and_a_rerun_commits_nothing(store):
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(200)})
    put(h, {"k1": "v1b", "k2": None})
    first = commit_log(h, CFG)
    assert first.committed and first.identifier == "compaction.users" and first.rows_added == 199
    assert table_state(h) == log_state(h) and len(table_state(h)) == 199
    again = commit_log(h, CFG)
    assert not again.committed and again.snapshot_id == first.snapshot_id
    table, _ = open_table(h.st, "users")
    assert [s.log_versions for s in history(table)] == [{"users-0": h.manifest().version}]


def test_a_change_appends_its_rows_and_masks_the_old_ones(store, monkeypatch):
    monkeypatch.setenv("COMPACTION_TABLE_BUCKETS", "16")
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(2000)})
    commit_log(h, CFG)
    before = data_files(h)
    assert len(before) == 16  # one file per bucket of the partition
    put(h, {"k7": "new", "k8": None}, ts=2)
    r = commit_log(h, CFG)
    assert (r.rows_added, r.rows_deleted) == (1, 1)
    assert (r.files_added, r.delete_files_added, r.files_removed) == (1, 2, 0)  # no data file rewritten
    after = data_files(h)
    assert before < after and len(after - before) == 3
    table, _ = open_table(h.st, "users")
    deletes = table.inspect.delete_files()
    assert deletes.num_rows == 2 and sum(deletes.column("record_count").to_pylist()) == 2
    assert r.bytes_written == sum(
        table.inspect.files()
        .filter(pc.is_in(table.inspect.files().column("file_path"), pa.array(sorted(after - before))))
        .column("file_size_in_bytes")
        .to_pylist()
    )
    state = table_state(h)
    assert state == log_state(h) and state[b"k7"][0] == b"new" and b"k8" not in state
    summary = table.current_snapshot().summary.additional_properties
    assert json.loads(summary["compaction.logs"])["users-0"]["version"] == h.manifest().version
    assert summary["compaction.log"] == "users-0"


def test_deletes_and_reinserts_of_one_key_over_many_commits(store):
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(2000)})
    commit_log(h, CFG)
    for step, value in enumerate(["a", None, "b", "c", None, "d"], start=2):
        put(h, {"k1": value, f"k{step * 10}": f"w{step}", f"k{step * 10 + 1}": None}, ts=step)
        r = commit_log(h, CFG)
        assert r.committed and r.rewrite.buckets == 0
        assert table_state(h) == log_state(h)
        # DuckDB over pyiceberg's scan, as a user reads it: the query finds the local `users` by its name
        users = scan(open_table(h.st, "users")[0])  # noqa: F841
        rows = duckdb.sql('SELECT key, value, "offset" FROM users').fetchall()
        assert len(rows) == len(log_state(h)) and {k: (v, o) for k, v, o in rows} == log_state(h)
    assert table_state(h)[b"k1"][0] == b"d"


def test_a_bucket_whose_masked_rows_pile_up_is_rewritten(store):
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(8000)})
    commit_log(h, CFG)
    put(h, {f"k{i}": f"u{i}" for i in range(8000) if i % 4}, ts=2)  # 3 of 4 rows: ~40% of each bucket masked
    r = commit_log(h, CFG)
    assert r.rewrite.buckets == 1 and r.rewrite.files_removed == 3 and r.snapshot_id == r.rewrite.snapshot_id
    table, _ = open_table(h.st, "users")  # the old data file, the change's, its delete file: one file
    assert table.inspect.delete_files().num_rows == 0 and len(data_files(h)) == 1
    assert table_state(h) == log_state(h)
    assert marks_of(table.current_snapshot())["users-0"].version == h.manifest().version  # marks carried


def test_many_logs_of_a_topic_commit_in_one_snapshot(store):
    logs = [store.log(f"orders-{p}") for p in range(4)]
    for p, h in enumerate(logs):
        put(h, {f"p{p}-k{i}": f"v{i}" for i in range(300)})
    results = commit_logs([LogCommit(h, CFG) for h in logs])
    assert len({r.snapshot_id for r in results}) == 1 and all(r.committed for r in results)
    put(logs[2], {"p2-k1": "new"}, ts=2)
    again = commit_logs([LogCommit(h, CFG) for h in logs])
    assert [r.committed for r in again] == [False, False, True, False]
    table, _ = open_table(store.storage, "orders")
    assert len(history(table)) == 2 and history(table)[-1].log == "orders-2"
    assert history(table)[-1].log_versions == {h.name: h.manifest().version for h in logs}
    for h in logs:
        assert table_state(h) == log_state(h)


def test_partitions_of_a_topic_share_its_table(store):
    logs = [store.log(f"orders.eu-{p}") for p in range(3)]
    for p, h in enumerate(logs):
        put(h, {f"p{p}-k{i}": f"v{i}" for i in range(50)})
        put(h, {"same-key": f"from {p}"})
        commit_log(h, CFG)
    table, ident = open_table(store.storage, "orders.eu")
    assert ident == "compaction.orders_eu"
    rows = scan(table)
    assert len(rows) == 3 * 51 and sorted(set(rows.column("partition").to_pylist())) == [0, 1, 2]
    assert history(table)[-1].log_versions == {h.name: h.manifest().version for h in logs}
    for h in logs:
        assert table_state(h) == log_state(h)


def test_structured_values_are_columns(tmp_path, store):
    config = build_config({"landing.format": "aiven"})
    root = tmp_path / "landing"
    write_lines(
        root / "users-0-0.jsonl",
        [
            {"key": {"id": 1}, "value": {"email": "a@x", "age": 3, "partition": "p"}, "offset": 0, "timestamp": 1},
            {"key": {"id": 2}, "value": {"email": "b@x", "age": 4}, "offset": 1, "timestamp": 1},
        ],
    )
    h = store.log("users-0")
    ingest(h, config, landing_logs(root)[0]["users-0"])
    commit_log(h, config)
    table, _ = open_table(h.st, "users")
    assert table.schema().identifier_field_names() == {"partition", "key"}
    names = [f.name for f in table.schema().fields]
    assert names[:2] == ["key", "value"] and names[-4:] == ["partition", "offset", "timestamp", "headers"]
    assert {"email", "age", "value_partition"} <= set(names)
    rows = scan(table).select(["email", "age", "value_partition"]).to_pylist()
    assert rows == [
        {"email": "a@x", "age": 3, "value_partition": "p"},
        {"email": "b@x", "age": 4, "value_partition": None},
    ]
    write_lines(
        root / "users-0-2.jsonl",
        [{"key": {"id": 2}, "value": {"email": "b2@x", "plan": "pro"}, "offset": 2, "timestamp": 2}],
    )
    ingest(h, config, landing_logs(root)[0]["users-0"])
    r = commit_log(h, config)  # a new field: the table's schema evolves with it
    assert r.committed and r.rows_added == 1
    table, _ = open_table(h.st, "users")
    assert scan(table).select(["email", "plan"]).to_pylist() == [
        {"email": "a@x", "plan": None},
        {"email": "b2@x", "plan": "pro"},
    ]


def test_a_bucket_of_many_small_files_is_rewritten(store):
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(100)})
    commit_log(h, CFG)
    rewrites = []
    for step in range(2, 2 + REWRITE_MAX_DATA_FILES):  # each commit adds a data file of one row
        put(h, {"k1": f"w{step}"}, ts=step)
        rewrites.append(commit_log(h, CFG).rewrite.buckets)
    assert rewrites == [0] * (REWRITE_MAX_DATA_FILES - 1) + [1]  # 9 data files: more than 8
    table, _ = open_table(h.st, "users")
    assert len(table.inspect.data_files()) == 1 and table.inspect.delete_files().num_rows == 0
    assert table_state(h) == log_state(h)
