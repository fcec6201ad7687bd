"""A commit brought up by the records a log appended since the table's mark (table/commit/tail.py) gives the table
the log's latest state, exactly as a comparison with the whole state does, over random histories of
appends, cleanings that drop expired tombstones, log-start moves and commits that skip versions."""

from __future__ import annotations

import random

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.table.commit.commit import commit_log
from compaction_assets.topics.config import build_config
from tests.table.helpers import log_state, put, table_state

TOMBSTONES_EXPIRE = {"delete.retention.ms": 50, "segment.bytes": 600, "min.cleanable.dirty.ratio": 0.0}


def _history(store, seed: int, config) -> tuple[int, int]:
    """A random history of one log, its table committed now and then and checked after each commit; how many
    commits came from the tail and how many from the whole state."""
    rng = random.Random(seed)
    handle = store.log(f"users-{seed % 3}")
    now, by_tail, by_state = 1_000, 0, 0
    for _ in range(40):
        now += rng.randint(1, 80)
        step = rng.random()
        if step < 0.5:
            rows = {f"k{rng.randrange(40)}": (None if rng.random() < 0.2 else f"v{now}-{i}") for i in range(8)}
            put(handle, rows, ts=now, config=config)
        elif step < 0.7:
            engine.run(handle, config, now, spark=None, force=True)
        elif step < 0.75:
            manifest = handle.manifest()
            if manifest.log_end_offset > manifest.log_start_offset:
                writer.set_log_start(handle, rng.randint(manifest.log_start_offset + 1, manifest.log_end_offset))
        elif handle.exists():
            result = commit_log(handle, config, now=now)
            assert table_state(handle) == log_state(handle, config), (seed, result)
            if result.committed:
                by_tail += result.from_tail
                by_state += not result.from_tail
    return by_tail, by_state


@pytest.mark.parametrize("seed", range(6))
def test_offset_logs_commit_their_tails_and_the_table_is_their_state(store, seed):
    by_tail, by_state = _history(store, seed, build_config(TOMBSTONES_EXPIRE))
    assert by_tail > 0 and by_state > 0  # both ways were taken (the first commit is always the whole state)


def test_a_timestamp_log_is_always_compared_with_its_whole_state(store):
    config = build_config({**TOMBSTONES_EXPIRE, "compaction.strategy": "timestamp"})
    by_tail, by_state = _history(store, 11, config)
    assert by_tail == 0 and by_state > 0


def test_a_tail_commit_reads_only_the_records_since_the_mark(store):
    handle = store.log("users-0")
    config = build_config({})
    put(handle, {f"k{i}": f"v{i}" for i in range(500)}, config=config)
    assert not commit_log(handle, config).from_tail
    put(handle, {"k1": "new", "k2": None, "k900": "added"}, ts=2, config=config)
    result = commit_log(handle, config)
    assert result.from_tail and result.records_read == 3
    assert (result.rows_added, result.rows_deleted) == (2, 1)
    state = table_state(handle)
    assert state == log_state(handle, config) and state[b"k1"][0] == b"new" and b"k2" not in state
