"""The documented downstream read (docs/table.md): DuckDB over pyiceberg's Arrow scan, row for row the
log's latest state."""

from __future__ import annotations

import duckdb
from pyiceberg.catalog import load_catalog

from compaction_assets.table.commit.commit import commit_log
from tests.table.helpers import CFG, log_state, put


def test_duckdb_reads_the_table_as_the_docs_show(store):
    h = store.log("users-0")
    put(h, {f"u{i}": f"v{i}" for i in range(10)} | {"u3": None})
    commit_log(h, CFG)
    uri = f"sqlite:///{store.storage.root}/_tables/catalog.db"
    # the query below finds this local by its name (DuckDB's replacement scan), as docs/table.md reads it
    users = load_catalog("compaction", type="sql", uri=uri).load_table("compaction.users").scan().to_arrow()  # noqa: F841
    rows = duckdb.sql('SELECT key, value, "offset" FROM users WHERE partition = 0 ORDER BY key').fetchall()
    assert {k: (v, o) for k, v, o in rows} == log_state(h)
