"""Dagster: the latest_state asset commits its log's change to the topic's table, with the table's
identifier, snapshot, rows added and deleted and log versions in its metadata; the asset check compares
the table with the checks' own model of the latest state, and fails on a table that lost a row."""

from __future__ import annotations

import dagster as dg
from pyiceberg.expressions import EqualTo

from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.checks import table_matches_latest_state
from compaction_assets.defs.table.table import compare_table, read_topics
from compaction_assets.table.reading.read import open_table
from tests.table.helpers import QUIET, land


def run(assets, resources, instance):
    return dg.materialize(assets, partition_key="users-0", resources=resources, instance=instance, run_config=QUIET)


def test_latest_state_commits_the_table_and_the_check_compares_it_with_the_model(env):
    tmp, store, resources, instance = env
    land(
        tmp / "landing",
        "a.jsonl",
        [
            {"key": "u1", "value": "v1", "timestamp": 100},
            {"key": "u2", "value": "v1", "timestamp": 110},
            {"key": "u1", "value": "v2", "timestamp": 120},
        ],
    )
    assets = [raw_segments, cleanable_range, compacted_log, latest_state, table_matches_latest_state]
    result = run(assets, resources, instance)
    assert result.success
    meta = result.asset_materializations_for_node("latest_state")[0].metadata
    assert meta["table"].value == "compaction.users" and meta["table_rows_added"].value == 2
    assert meta["table_log_versions"].value == {"users-0": store.handle("users-0").manifest().version}
    assert int(meta["table_snapshot_id"].value) > 0
    assert {c.check_name: c.passed for c in result.get_asset_check_evaluations()} == {
        "table_matches_latest_state": True
    }

    land(tmp / "landing", "b.jsonl", [{"key": "u2", "value": None, "timestamp": 130}])
    result = run(assets, resources, instance)
    meta = result.asset_materializations_for_node("latest_state")[0].metadata
    assert (meta["table_rows_added"].value, meta["table_rows_deleted"].value) == (0, 1)

    table, _ = open_table(store.handle("users-0").st, "users")  # someone deletes a row, keeping the marks
    table.delete(
        EqualTo("key", b"u1"),
        snapshot_properties={
            k: v
            for k, v in table.current_snapshot().summary.additional_properties.items()
            if k.startswith("compaction.")
        },
    )
    outcome, ident, _ = compare_table(store, "users-0")  # the check's comparison, on the tampered table
    assert not outcome.passed and "1 keys missing (b'u1')" in outcome.describe()
    # a batch reads the topic's table once for all its logs' checks: the same comparison, tampered or not
    [(logs, topic_rows)] = list(read_topics(store, {"users-0": 2}))
    batch_outcome, batch_ident, version = compare_table(store, "users-0", topic_rows=topic_rows)
    assert logs == ["users-0"] and (batch_outcome, batch_ident) == (outcome, ident) and not batch_outcome.passed
    assert version == store.handle("users-0").manifest().version
    assert list(read_topics(store, {"orders-0": 1})) == [(["orders-0"], None)]  # no table: each log's check says so


def test_a_batch_reads_a_topics_table_in_groups_of_bounded_rows(env):
    """Logs of two topics: one group a topic, cut where the rows would pass the bound; a log above it alone."""
    _, store, _, _ = env
    groups = [logs for logs, _ in read_topics(store, {"a-0": 3, "b-0": 1, "a-1": 3, "a-2": 9, "a-3": 1}, max_rows=6)]
    assert groups == [["a-0", "a-1"], ["a-2"], ["a-3"], ["b-0"]]
