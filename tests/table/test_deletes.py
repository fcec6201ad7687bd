"""Deletes that really delete: a tombstoned key leaves the table in the snapshot that commits it (a
position delete masks its row), its bucket is rewritten without it once half of delete.retention.ms has
passed (the clock passed as `now`), and once the snapshots before that rewrite expire no snapshot and no
file of the table holds the deleted value; before that, time travel shows it."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow.parquet as pq

from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.commit.expiry import ORPHAN_GRACE_MS
from compaction_assets.table.reading.read import history, open_table, scan, snapshot_as_of
from compaction_assets.topics.config import build_config
from tests.table.helpers import put, table_state

RETENTION_MS = 60_000
CFG = build_config({"delete.retention.ms": RETENTION_MS, "max.compaction.lag.ms": 120_000})


def _values_in_files(table) -> set[bytes]:
    """Every value in every data file under the table's folder, referenced or not (delete files hold none)."""
    root = Path(table.location().removeprefix("file://"))
    return {
        v
        for f in root.rglob("*.parquet")
        if not f.name.endswith("-deletes.parquet")
        for v in pq.read_table(f, columns=["value"]).column("value").to_pylist()
    }


def test_a_deleted_value_is_unreachable_after_the_retention(store):
    h = store.log("users-0")
    put(h, {f"k{i}": f"v{i}" for i in range(100)} | {"gdpr": "secret"}, config=CFG)
    first = commit_log(h, CFG)
    put(h, {"gdpr": None}, ts=2, config=CFG)
    deleted = commit_log(h, CFG)
    assert deleted.rows_deleted == 1 and deleted.delete_files_added == 1 and b"gdpr" not in table_state(h)
    table, _ = open_table(h.st, "users")
    assert table_state(h, first.snapshot_id)[b"gdpr"][0] == b"secret"  # time travel, within the window
    assert snapshot_as_of(table, "users-0", str(first.log_version)).snapshot_id == first.snapshot_id
    assert b"secret" in _values_in_files(table)  # masked, its data file kept
    now = int(time.time() * 1000)
    early = commit_log(h, CFG, now=now + RETENTION_MS // 2 + 1)  # nothing to commit; the masked
    assert not early.committed and early.expiry.snapshots_expired == 0  # row's bucket is rewritten
    assert early.rewrite.buckets == 1 and early.snapshot_id == early.rewrite.snapshot_id
    table, _ = open_table(h.st, "users")
    assert table.inspect.delete_files().num_rows == 0 and b"secret" not in set(scan(table).column("value").to_pylist())
    assert table_state(h, first.snapshot_id)[b"gdpr"][0] == b"secret"  # old snapshots still reach it
    late = commit_log(h, CFG, now=now + RETENTION_MS + ORPHAN_GRACE_MS + 1)
    assert late.expiry.snapshots_expired == 2 and late.expiry.files_removed >= 1
    table, _ = open_table(h.st, "users")
    assert [s.snapshot_id for s in history(table)] == [early.rewrite.snapshot_id]
    assert b"secret" not in _values_in_files(table)
    assert len(scan(table)) == 100


def test_time_travel_by_log_version_and_by_time(store):
    h = store.log("users-0")
    put(h, {"a": "1"}, config=CFG)
    v1 = commit_log(h, CFG)
    put(h, {"a": "2"}, ts=2, config=CFG)
    v2 = commit_log(h, CFG)
    table, _ = open_table(h.st, "users")
    snaps = history(table)
    assert snapshot_as_of(table, "users-0", str(v1.log_version)).snapshot_id == v1.snapshot_id
    assert snapshot_as_of(table, "users-0", str(v2.log_version + 5)).snapshot_id == v2.snapshot_id
    assert snapshot_as_of(table, "users-0", str(snaps[0].timestamp_ms)).snapshot_id == v1.snapshot_id
    assert table_state(h, v1.snapshot_id) == {b"a": (b"1", 0)}
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(snaps[-1].timestamp_ms / 1000 + 1))
    assert snapshot_as_of(table, "users-0", iso).snapshot_id == v2.snapshot_id
