"""Forget, then the clock: a forgotten key leaves the logs' current files and the table's current rows at
once, and `reachable` says until when older files and snapshots hold it. Cleanings and commits run with an
advancing `now` until it says unreachable; then every Parquet file under the store and the warehouse (log
segments, the table's data files) and every snapshot's scan is read independently: the value is nowhere."""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.cleaning import engine
from compaction_assets.defs.forget import forget_job
from compaction_assets.log import writer
from compaction_assets.log.forget import forget
from compaction_assets.log.reader import iter_records
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.table.reading.reach import reachable
from compaction_assets.table.reading.read import history, open_table, scan
from compaction_assets.topics.config import build_config
from tests.table.helpers import QUIET, table_state

# longer than the table's 10-minute grace on removing files: `now` runs ahead of the files' real times here,
# so a shorter retention would expire snapshots while their files still look young (they would be removed
# by a later expiry, which a quiet table never has)
RETENTION_MS = 700_000
CFG = build_config({"delete.retention.ms": RETENTION_MS, "max.compaction.lag.ms": 120_000})
SECRET = b"secret-value-of-the-gdpr-key"


def _holds_secret(value) -> bool:
    return isinstance(value, (bytes, str)) and SECRET in (value if isinstance(value, bytes) else value.encode())


def parquet_holding_the_secret(root: Path) -> list[str]:
    """Every Parquet file under `root` (log segments, side tables, the table's data and delete files) whose
    rows hold the secret in any column, nested ones flattened."""
    found = []
    for path in root.rglob("*.parquet"):
        table = pq.read_table(path)
        for column in table.flatten().columns:
            flat = column
            while pa.types.is_list(flat.type) or pa.types.is_struct(flat.type):
                flat = pa.chunked_array([c.flatten() for c in flat.chunks]) if pa.types.is_list(flat.type) else None
                if flat is None:
                    break
            if flat is not None and any(_holds_secret(v) for v in flat.to_pylist()):
                found.append(str(path))
                break
    return found


def snapshots_showing_the_secret(handle) -> list[int]:
    table, _ = open_table(handle.st, "users")
    return [
        s.snapshot_id
        for s in history(table)
        if any(_holds_secret(v) for v in scan(table, s.snapshot_id).column("value").to_pylist())
    ]


def test_a_forgotten_value_becomes_unreachable_everywhere(store, spark):
    h = store.log("users-0")
    offsets = iter(range(500, 10_000))

    def land_records(rows):
        writer.append(h, CFG, [{"offset": next(offsets), "key": k, "value": v, "timestamp": 1_000} for k, v in rows])

    land_records([(f"k{i}", f"v{i}") for i in range(30)] + [("gdpr", SECRET.decode() + "-1")])
    commit_log(h, CFG)
    land_records([("gdpr", SECRET.decode() + "-2"), ("k1", "v1b")])
    writer.roll(h)
    start = int(time.time() * 1000)
    engine.run(h, CFG, start, spark=spark, force=True)  # the first value masked by a cleaning
    land_records([("gdpr", SECRET.decode() + "-3")])
    commit_log(h, CFG, now=start)
    assert table_state(h)[b"gdpr"][0].startswith(SECRET)
    other_rows = {k: v for k, v in table_state(h).items() if k != b"gdpr"}

    done = forget(h, CFG, [b"gdpr"])
    committed = commit_log(h, CFG, now=start)
    assert committed.rows_deleted == 1 and b"gdpr" not in table_state(h)
    assert {k: v for k, v in table_state(h).items()} == other_rows  # other keys untouched
    assert done.of(b"gdpr").tombstone_offset == h.manifest().log_end_offset - 1
    first = reachable([(h, CFG)], [b"gdpr"], start)[0]
    assert not first.unreachable
    log_part = first.logs[0]
    assert log_part.value_offsets == () and log_part.hidden_value_rows == 0 and log_part.old_files
    assert first.table and not first.table[0].live and first.table[0].masked_files

    now, steps = start, 0
    while not reachable([(h, CFG)], [b"gdpr"], now)[0].unreachable:
        steps += 1
        assert steps <= 20, reachable([(h, CFG)], [b"gdpr"], now)[0].as_document()
        now += RETENTION_MS // 4
        engine.run(h, CFG, now, spark=spark, force=True)  # starts with the store's garbage collection
        commit_log(h, CFG, now=now)  # the table's rewrite and expiry
    bound = first.unreachable_by
    assert bound is not None and bound.at_ms is not None  # bounded at once: the old versions were dropped
    assert parquet_holding_the_secret(Path(store.location)) == []
    assert snapshots_showing_the_secret(h) == []
    assert {k: v[0] for k, v in table_state(h).items()} == {k: v[0] for k, v in other_rows.items()}


def test_the_forget_job_forgets_and_commits_the_table(env):
    _, store, resources, instance = env
    handle = store.handle("users-0")
    writer.append(handle, CFG, [{"key": k, "value": f"{k}-secret", "timestamp": 1} for k in ("a", "b", "c")])
    result = forget_job.execute_in_process(
        run_config={**QUIET, "ops": {"forget_op": {"config": {"topic": "users", "keys": ["a", "zz"]}}}},
        resources=resources,
        instance=instance,
    )
    assert result.success
    assert {k: v for k, (v, _) in table_state(handle).items()} == {b"b": b"b-secret", b"c": b"c-secret"}
    assert [(r.offset, r.value) for r in iter_records(handle) if r.key == b"a"] == [(0, None)]
    refused = forget_job.execute_in_process(
        run_config={**QUIET, "ops": {"forget_op": {"config": {"topic": "nobody", "keys": ["a"]}}}},
        resources=resources,
        instance=instance,
        raise_on_error=False,
    )
    assert not refused.success
