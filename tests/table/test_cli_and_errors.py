"""`compaction table show|scan|history|commit`, `latest-state --as-of`, and one-line errors: a catalog that
cannot be reached, a schema someone else changed, two topics that map to one table name, a log past the
bound of the state a commit builds in the process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyiceberg.types import StringType

from compaction_assets.cli import main
from compaction_assets.store.fs import Storage
from compaction_assets.table.catalog import TableError, locate, table_name
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.commit.group import TopicBatch
from compaction_assets.table.reading.read import open_table
from tests.table.helpers import CFG, put

ROOT = Path(__file__).resolve().parents[2]


def cli(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_table_commands(store, capsys):
    h = store.log("users-0")
    put(h, {"a": "1", "b": "2"})
    code, out, _ = cli(capsys, "--store", store.location, "table", "commit")
    assert code == 0 and json.loads(out)[0]["rows_added"] == 2
    put(h, {"a": "3", "b": None}, ts=2)
    assert cli(capsys, "--store", store.location, "table", "commit", "users-0")[0] == 0
    code, out, _ = cli(capsys, "--store", store.location, "table", "show", "users")
    shown = json.loads(out)
    assert shown["table"] == "compaction.users" and shown["identifier_fields"] == ["key", "partition"]
    assert shown["log_versions"] == {"users-0": 2} and shown["rows"] == 1
    code, out, _ = cli(capsys, "--store", store.location, "table", "scan", "users", "--partition", "0")
    assert [json.loads(line)["value"] for line in out.splitlines()] == ["3"]
    code, out, _ = cli(capsys, "--store", store.location, "table", "history", "users")
    assert [s["log_versions"] for s in json.loads(out)] == [{"users-0": 1}, {"users-0": 2}]
    code, out, _ = cli(capsys, "--store", store.location, "latest-state", "users-0", "--as-of", "1")
    assert [(json.loads(line)["key"], json.loads(line)["value"]) for line in out.splitlines()] == [
        ("a", "1"),
        ("b", "2"),
    ]
    code, out, err = cli(capsys, "--store", store.location, "latest-state", "users-0", "--as-of", "yesterday")
    assert code == 1 and err.count("\n") == 1 and "ISO-8601" in err


def test_an_unreachable_catalog_is_one_line(store, capsys, monkeypatch):
    put(store.log("users-0"), {"a": "1"})
    monkeypatch.setenv("COMPACTION_TABLE_CATALOG_TYPE", "rest")
    monkeypatch.setenv("COMPACTION_TABLE_CATALOG_URI", "http://127.0.0.1:9")
    start = time.monotonic()
    code, _, err = cli(capsys, "--store", store.location, "table", "commit")
    assert code == 1 and err.count("\n") == 1 and time.monotonic() - start < 120
    assert err.startswith("error: cannot reach the table rest catalog http://127.0.0.1:9")


def test_a_schema_changed_by_someone_else_is_refused(store):
    h = store.log("users-0")
    put(h, {"a": "1"})
    commit_log(h, CFG)
    table, _ = open_table(h.st, "users")
    with table.update_schema() as update:
        update.add_column("note", StringType())
    put(h, {"a": "2"}, ts=2)
    with pytest.raises(TableError, match=r"table compaction.users: its schema was changed outside the product"):
        commit_log(h, CFG)


def test_topic_names_map_to_table_names(store):
    assert table_name("orders.eu-west") == "orders_eu-west"
    put(store.log("a.b-0"), {"k": "v"})
    put(store.log("a_b-0"), {"k": "v"})
    commit_log(store.log("a.b-0"), CFG)
    with pytest.raises(TableError, match=r"table compaction.a_b holds topic 'a.b', not 'a_b': both names map to it"):
        commit_log(store.log("a_b-0"), CFG)


def test_the_cli_error_is_one_line_in_a_process(store):
    put(store.log("users-0"), {"a": "1"})
    proc = subprocess.run(
        [sys.executable, "-m", "compaction_assets", "--store", store.location, "table", "scan", "users"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and proc.stderr.strip().count("\n") == 0 and "has no table" in proc.stderr


def test_object_stores_keep_their_own_local_catalogs(monkeypatch):
    """Two stores on object storage, or one bucket on two servers, never share a local SQLite catalog."""
    monkeypatch.delenv("COMPACTION_TABLE_CATALOG_URI", raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:8333")
    first = locate(Storage("bucket-a/logs", "s3", None)).uri
    second = locate(Storage("bucket-b/logs", "s3", None)).uri
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9333")
    first_elsewhere = locate(Storage("bucket-a/logs", "s3", None)).uri
    assert len({first, second, first_elsewhere}) == 3
    assert first.startswith("sqlite:///") and first.endswith("/catalog.db") and "bucket-a_logs" in first


@pytest.mark.slow  # a log of 270 MiB of visible records (compressible: under 1 MiB on disk), about a minute
def test_a_log_past_the_in_process_bound_commits_through_spark_tasks(store, monkeypatch, spark):
    monkeypatch.setenv("COMPACTION_TABLE_MAX_STATE_BYTES", str(256 << 20))
    big, small = store.log("big-0"), store.log("big-1")
    value = "x" * (1 << 20)
    for part in range(9):  # 30 MiB an append: the test holds one append's rows at a time
        put(big, {f"k{part}-{i}": value for i in range(30)})
    put(small, {"a": "1"})
    assert big.manifest().total_size > 256 << 20
    alone = commit_log(big, CFG)
    assert alone.committed and alone.path == "spark" and alone.rows_added == 270
    assert alone.why.startswith("its visible records (270 MiB) are past COMPACTION_TABLE_MAX_STATE_BYTES (256 MiB)")
    put(big, {"k0-0": "new"})
    tables = TopicBatch(2**30)
    tables.add(small, CFG)
    tables.add(big, CFG)  # queued without its state: its change is found when the topic commits
    outcomes = tables.commit()
    assert {log: o.result.path for log, o in outcomes.items() if o.result} == {"big-0": "tail", "big-1": "in-process"}
    assert outcomes["big-0"].result.log_versions == {"big-0": 10, "big-1": 1}
