"""A store on the S3 server (SeaweedFS): the topic's table is written beside the logs in the bucket through
the store's own S3 settings, committed incrementally, and deletes leave no file holding the value."""

from __future__ import annotations

import time

import pyarrow.parquet as pq

from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.commit.expiry import ORPHAN_GRACE_MS
from compaction_assets.table.reading.read import open_table
from tests.table.helpers import CFG, log_state, put, table_state


def test_a_table_in_the_bucket(s3_store_uri, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPACTION_TABLE_CATALOG_URI", f"sqlite:///{tmp_path}/catalog.db")
    h = LogStore(s3_store_uri, gc_grace_s=0).log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(50)} | {"gdpr": "secret"})
    commit_log(h, CFG)
    put(h, {"gdpr": None, "k1": "new"}, ts=2)
    r = commit_log(h, CFG)
    assert (r.rows_added, r.rows_deleted) == (1, 1) and (r.files_added, r.delete_files_added) == (1, 1)
    assert table_state(h) == log_state(h)
    table, _ = open_table(h.st, "users")
    assert table.location().startswith(s3_store_uri.rsplit("/", 1)[0] + "/store/_tables/warehouse/")
    later = int(time.time() * 1000) + CFG.delete_retention_ms + ORPHAN_GRACE_MS + 1
    late = commit_log(h, CFG, now=later)  # the masked rows' buckets rewritten, the snapshots before expired
    assert late.rewrite.buckets >= 1 and late.expiry.snapshots_expired == 2
    st = Storage.open(table.location())
    values = set()
    for path in st.list_files_recursive(st.root):
        if path.endswith(".parquet") and not path.endswith("-deletes.parquet"):
            values |= set(pq.read_table(path, filesystem=st.fs, columns=["value"]).column("value").to_pylist())
    assert b"secret" not in values and b"new" in values
