"""table/sqlite_catalog.py reads and writes pyiceberg's SqlCatalog rows exactly: each sees the other's tables
and commits, a commit that lost the race is refused, and a command's commit does not import SQLAlchemy."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

from compaction_assets.table.sqlite_catalog import SqliteCatalog, open_sqlite

ROOT = Path(__file__).resolve().parents[2]
ROWS = pa.table({"key": pa.array([b"a", b"b"]), "value": pa.array([b"1", b"2"])})


def _properties(folder: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{folder}/catalog.db", "warehouse": f"file://{folder}/warehouse"}


def _rows(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT * FROM iceberg_tables ORDER BY table_name").fetchall()


def test_a_new_file_gets_sqlcatalogs_tables_and_both_see_each_others_commits(tmp_path):
    fast = open_sqlite("compaction", _properties(tmp_path))
    assert isinstance(fast, SqliteCatalog)
    fast.create_namespace_if_not_exists("compaction")
    assert fast.list_namespaces() == [("compaction",)]
    created = fast.create_table_transaction("compaction.users", schema=ROWS.schema)  # inserted by SqliteCatalog
    created.append(ROWS)
    created.commit_transaction()
    sql = SqlCatalog("compaction", **_properties(tmp_path))
    assert sql.load_table("compaction.users").scan().to_arrow().sort_by("key") == ROWS
    sql.load_table("compaction.users").append(ROWS.slice(0, 1))  # SqlCatalog commits...
    fast.load_table("compaction.users").append(ROWS.slice(1, 1))  # ...then SqliteCatalog, after it
    assert len(sql.load_table("compaction.users").scan().to_arrow()) == 4
    (row,) = _rows(tmp_path / "catalog.db")
    assert row[:3] == ("compaction", "compaction", "users") and row[5] == "TABLE"
    assert row[4] is not None and row[3] != row[4]  # the previous metadata kept, as SqlCatalog keeps it
    assert fast.list_tables("compaction") == sql.list_tables("compaction") == [("compaction", "users")]


def test_a_commit_from_a_stale_table_is_refused_and_changes_nothing(tmp_path):
    fast = open_sqlite("compaction", _properties(tmp_path))
    fast.create_namespace("compaction")
    # pyiceberg's own retry off, as the product's tables have it: the refusal reaches the caller
    fast.create_table("compaction.users", schema=ROWS.schema, properties={"commit.retry.num-retries": "0"})
    first, second = fast.load_table("compaction.users"), fast.load_table("compaction.users")
    first.append(ROWS)
    before = _rows(tmp_path / "catalog.db")
    with pytest.raises(CommitFailedException, match="Requirement failed: branch main"):  # as SqlCatalog says it
        second.append(ROWS)
    assert _rows(tmp_path / "catalog.db") == before
    with pytest.raises(CommitFailedException, match="Table already exists"):  # its requirement, as SqlCatalog's
        fast.create_table_transaction("compaction.users", schema=ROWS.schema).commit_transaction()
    with pytest.raises(NoSuchTableError, match="Table does not exist: compaction.nobody"):
        fast.load_table("compaction.nobody")


def test_a_catalog_of_the_older_schema_or_sqlalchemy_settings_is_sqlcatalogs(tmp_path):
    path = tmp_path / "catalog.db"
    with sqlite3.connect(path) as connection:  # pyiceberg's v0 schema: no iceberg_type column
        connection.execute(
            "CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL, table_namespace VARCHAR(255) NOT "
            "NULL, table_name VARCHAR(255) NOT NULL, metadata_location VARCHAR(1000), previous_metadata_location "
            "VARCHAR(1000), PRIMARY KEY (catalog_name, table_namespace, table_name))"
        )
        connection.execute(
            "CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL, namespace VARCHAR(255) "
            "NOT NULL, property_key VARCHAR(255) NOT NULL, property_value VARCHAR(1000) NOT NULL, PRIMARY KEY "
            "(catalog_name, namespace, property_key))"
        )
    assert type(open_sqlite("compaction", _properties(tmp_path))) is SqlCatalog
    echoing = {**_properties(tmp_path / "other"), "echo": "false"}
    (tmp_path / "other").mkdir()
    assert type(open_sqlite("compaction", echoing)) is SqlCatalog


def test_a_commands_commit_imports_no_sqlalchemy(tmp_path):
    """The product's own path (open_catalog, a first commit, a second): SQLAlchemy only for the catalog's
    creation, in the first process; none in the next."""
    script = (
        "import json, sys\n"
        "from compaction_assets.log import writer\n"
        "from compaction_assets.store.log_store import LogStore\n"
        "from compaction_assets.table.commit.commit import commit_log\n"
        "from compaction_assets.topics.config import build_config\n"
        "handle = LogStore(sys.argv[1]).log('users-0', must_exist=False)\n"
        "writer.append(handle, build_config({}), [{'key': sys.argv[2], 'value': 'v', 'timestamp': 1}])\n"
        "result = commit_log(handle, build_config({}))\n"
        "print(json.dumps([result.committed, 'sqlalchemy' in sys.modules]))\n"
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "COMPACTION_TABLES": "1"}

    def run(key: str) -> list[bool]:
        done = subprocess.run(
            [sys.executable, "-c", script, str(tmp_path / "store"), key], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run("a") == [True, True]  # the first makes the catalog's tables through SqlCatalog
    assert run("b") == [True, False]


def test_the_products_catalog_is_this_one_unless_pyicebergs_configuration_adds_to_it(tmp_path, monkeypatch):
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.table.catalog import locate, open_catalog

    plain = open_catalog(locate(LogStore(str(tmp_path / "plain")).storage))
    assert type(plain) is SqliteCatalog
    monkeypatch.setenv("PYICEBERG_CATALOG__COMPACTION__ECHO", "false")  # pyiceberg's configuration, merged
    configured = open_catalog(locate(LogStore(str(tmp_path / "configured")).storage))
    assert type(configured) is SqlCatalog  # pyiceberg merges its configuration read at its import
