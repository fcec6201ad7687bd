"""The downstream Dagster asset of docs/table.md ("A changes feed"), run as the docs write it: materialized
with `dagster.materialize` on a real instance, it takes every row at first, then only the change made since
its last run (its cursor, the snapshot id in its materialization's metadata), then nothing."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg

from compaction_assets.table.commit.commit import commit_log
from resources.log_store import LogStoreResource
from tests.table.helpers import CFG, QUIET, put

DOC = Path(__file__).resolve().parents[2] / "docs" / "table.md"


def _documented_asset() -> dg.AssetsDefinition:
    """The asset of the code block after the docs' marker, defined by running that block."""
    match = re.search(r"<!-- changes-feed: dagster asset -->\n```python\n(.*?)\n```", DOC.read_text(), re.S)
    assert match, "docs/table.md has no code block after <!-- changes-feed: dagster asset -->"
    namespace: dict[str, object] = {}
    # dont_inherit: the block runs as a module of its own would, without this one's `from __future__` annotations
    exec(compile(match.group(1), str(DOC), "exec", dont_inherit=True), namespace)
    asset = namespace["users_changes"]
    assert isinstance(asset, dg.AssetsDefinition)
    return asset


def test_the_documented_asset_processes_only_what_changed(store):
    h = store.log("users-0")
    put(h, {"a": "1", "b": "2", "c": "3"})
    commit_log(h, CFG)
    asset = _documented_asset()
    resources = {"log_store": LogStoreResource(root=store.location)}
    with dg.instance_for_test() as instance:

        def materialized() -> tuple[int, int, int]:
            result = dg.materialize([asset], resources=resources, instance=instance, run_config=QUIET)
            assert result.success
            [event] = result.asset_materializations_for_node("users_changes")
            md = event.metadata
            return md["upserts"].value, md["deletes"].value, int(md["snapshot_id"].value)

        first = commit_log(h, CFG).snapshot_id  # nothing new: the current snapshot
        assert materialized() == (3, 0, first)  # the first run: every row
        put(h, {"a": "changed", "b": None, "d": "new"}, ts=2)
        second = commit_log(h, CFG).snapshot_id
        assert materialized() == (2, 1, second)  # a and d upserted, b deleted: the change only
        assert materialized() == (0, 0, second)
