"""A batch's table commits (`TopicBatch`): logs of two topics added from many threads, each topic committed
once in one snapshot recording every log's version, none lost; a re-run commits nothing; pending states
beyond the bound commit their topic early, as a group; a log queued twice commits once."""

from __future__ import annotations

import threading

from compaction_assets.table.commit.commit import LogCommit, commit_logs
from compaction_assets.table.commit.group import TopicBatch
from compaction_assets.table.reading.read import history, open_table
from tests.table.helpers import CFG, log_state, put, table_state


def _logs(store):
    logs = [store.log(name) for name in ("users-0", "users-1", "users-2", "orders-0", "orders-1")]
    for p, h in enumerate(logs):
        put(h, {f"k{i}": f"{h.name}-v{i}" for i in range(200 * (p + 1))})
        put(h, {"k1": None, "k2": "again"}, ts=2)
    return logs


def _added_from_threads(tables: TopicBatch, logs) -> None:
    start = threading.Barrier(len(logs))

    def add(h):
        start.wait()
        tables.add(h, CFG)

    threads = [threading.Thread(target=add, args=(h,)) for h in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_a_batch_commits_each_topic_once_with_every_logs_version(store):
    logs = _logs(store)
    tables = TopicBatch(2**30)
    _added_from_threads(tables, logs)
    outcomes = tables.commit()
    assert sorted(outcomes) == sorted(h.name for h in logs)
    assert all(o.error is None and o.result.committed for o in outcomes.values())
    for topic, names in (("users", ["users-0", "users-1", "users-2"]), ("orders", ["orders-0", "orders-1"])):
        table, _ = open_table(store.storage, topic)
        [snapshot] = history(table)  # one snapshot for the topic's logs
        assert snapshot.log_versions == {n: store.log(n).manifest().version for n in names}
        assert {outcomes[n].result.snapshot_id for n in names} == {snapshot.snapshot_id}
    for h in logs:
        assert table_state(h) == log_state(h) and b"k1" not in table_state(h)

    again = TopicBatch(2**30)  # a re-run: nothing to commit
    _added_from_threads(again, logs)
    assert not any(o.result.committed for o in again.commit().values())
    assert all(len(history(open_table(store.storage, t)[0])) == 1 for t in ("users", "orders"))


def test_pending_states_beyond_the_bound_commit_their_topic_early_as_groups(store):
    logs = _logs(store)
    tables = TopicBatch(max_bytes=1)  # every state outgrows it: each add commits its topic at once
    for h in logs:
        tables.add(h, CFG)
    table, _ = open_table(store.storage, "users")
    assert len(history(table)) == 3  # committed before `commit`, a group each
    outcomes = tables.commit()
    assert all(o.error is None and o.result.committed for o in outcomes.values())
    assert len(history(open_table(store.storage, "users")[0])) == 3  # the upkeep commits nothing new
    for h in logs:
        assert table_state(h) == log_state(h)


def test_a_log_queued_twice_commits_once(store):
    h = store.log("events-0")
    put(h, {"a": "1", "b": "2"})
    first, second = commit_logs([LogCommit(h, CFG), LogCommit(h, CFG)])
    assert first == second and first.rows_added == 2 and table_state(h) == log_state(h)
