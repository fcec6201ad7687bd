"""Group commits: a topic's logs committing from many threads at once (a batch's cleanings) share
snapshots, each log's rows right, none lost; a log queued twice commits once."""

from __future__ import annotations

import threading

from compaction_assets.table.commit import LogCommit, commit_logs
from compaction_assets.table.group import TopicCommits
from compaction_assets.table.read import history, open_table
from tests.table.helpers import CFG, log_state, put, table_state


def test_logs_committing_together_share_snapshots(store):
    logs = [store.log(f"events-{p}") for p in range(6)]
    put(logs[0], {f"k{i}": f"v{i}" for i in range(20_000)})    # a long first commit: the others queue behind it
    for p, h in enumerate(logs[1:], start=1):
        put(h, {f"p{p}-k{i}": f"v{i}" for i in range(100)})
    tables, results, start = TopicCommits(), {}, threading.Barrier(len(logs))

    def commit(h):
        start.wait()
        results[h.name] = tables.commit(h, CFG)

    threads = [threading.Thread(target=commit, args=(h,)) for h in logs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.committed for r in results.values())
    table, _ = open_table(store.storage, "events")
    snapshots = history(table)
    assert len(snapshots) < len(logs) and len({r.snapshot_id for r in results.values()}) == len(snapshots)
    assert snapshots[-1].log_versions == {h.name: h.manifest().version for h in logs}
    for h in logs:
        assert table_state(h) == log_state(h)


def test_a_log_queued_twice_commits_once(store):
    h = store.log("events-0")
    put(h, {"a": "1", "b": "2"})
    first, second = commit_logs([LogCommit(h, CFG), LogCommit(h, CFG)])
    assert first == second and first.rows_added == 2 and table_state(h) == log_state(h)
