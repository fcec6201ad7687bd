"""The checks through Dagster, on a real instance: a failing blocking check stops `latest_state` of its
partition while other partitions go on, and a partition's checks re-run without cleaning again."""

import json

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.checks import compacted_log_checks
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.log import writer
from compaction_assets.store.log_store import KEEP_VERSIONS
from resources.log_store import LogStoreResource
from tests.wrong_cleaning import store_cleaning_with, writes_nothing

ASSETS = [raw_segments, cleanable_range, compacted_log, latest_state, compacted_log_checks]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@pytest.fixture
def env(tmp_path, spark):
    topics = tmp_path / "topics.yaml"
    topics.write_text("defaults: {min.cleanable.dirty.ratio: 0.3, delete.retention.ms: 1000}\n")
    store = LogStoreResource(
        root=str(tmp_path / "store"),
        landing=str(tmp_path / "landing"),
        topics_file=str(topics),
        latest_state_root=str(tmp_path / "latest"),
    )
    resources = {"log_store": store, "pyspark": LazyPySparkResource(spark_config={})}
    for part in (0, 1):
        folder = tmp_path / "landing" / "users" / f"partition={part}"
        folder.mkdir(parents=True)
        (folder / "a.jsonl").write_text(
            "".join(json.dumps({"key": f"k{i % 2}", "value": str(i), "timestamp": 100 + i}) + "\n" for i in range(6))
        )
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, ["users-0", "users-1"])
        yield store, resources, instance


def _materialize(assets, log, resources, instance, **kw):
    return dg.materialize(
        assets, partition_key=log, resources=resources, instance=instance, run_config=QUIET, raise_on_error=False, **kw
    )


def _rerun_checks(log, resources, instance):
    """The checks alone for one partition, as the UI's "Execute" on a partition's checks launches them
    (a run of the checks only, tagged with the partition)."""
    return dg.materialize(
        [compacted_log, compacted_log_checks],
        resources=resources,
        instance=instance,
        run_config=QUIET,
        raise_on_error=False,
        tags={"dagster/partition": log},
        selection=dg.AssetSelection.checks_for_assets(compacted_log),
    )


def _materialized(result) -> set[str]:
    return {e.asset_key.path[-1] for e in result.get_asset_materialization_events()}


def test_a_failing_blocking_check_stops_latest_state_of_its_partition_only(env):
    store, resources, instance = env
    # a wrong cleaning: decides right, then writes nothing, so superseded records stay visible
    wrong = {**resources, "log_store": store_cleaning_with(store, writes_nothing())}
    bad = _materialize(ASSETS, "users-0", wrong, instance)
    checks = {c.check_name: c for c in bad.get_asset_check_evaluations()}
    assert checks["latest_value_per_key"].passed is False
    assert checks["latest_value_per_key"].severity == dg.AssetCheckSeverity.ERROR
    assert checks["latest_value_per_key"].metadata["examples_records_not_the_winner"].value
    assert "latest_state" not in _materialized(bad)  # blocked
    assert "compacted_log" in _materialized(bad)

    good = _materialize(ASSETS, "users-1", resources, instance)  # the other partition goes on
    assert good.success and "latest_state" in _materialized(good)
    assert all(c.passed for c in good.get_asset_check_evaluations())


def test_checks_rerun_without_cleaning_again(env):
    store, resources, instance = env
    assert _materialize(ASSETS, "users-1", resources, instance).success
    handle = store.handle("users-1")
    cleaning = {
        k: v.value
        for k, v in instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("compacted_log"), asset_partitions=["users-1"]), limit=1
        )
        .records[0]
        .asset_materialization.metadata.items()
    }
    assert cleaning["cleaned"] is True
    # later changes push the cleaning's versions past the versions a log keeps: the pin keeps them
    cfg = resources["log_store"].config_for("users-1")
    for i in range(KEEP_VERSIONS + 2):
        writer.append(handle, cfg, [{"key": "k9", "value": str(i), "timestamp": 1000 + i}])
    assert handle.manifest().version > cleaning["after_version"] + KEEP_VERSIONS
    handle.collect_garbage(grace_s=0)

    rerun = _rerun_checks("users-1", resources, instance)
    assert rerun.success
    assert _materialized(rerun) == set()  # nothing cleaned again
    evaluations = rerun.get_asset_check_evaluations()
    assert sorted(c.check_name for c in evaluations) == [
        "latest_value_per_key",
        "max_compaction_delay",
        "offsets_and_order_preserved",
        "tombstone_retention",
    ]
    assert all(c.passed for c in evaluations)
    assert {c.metadata["after_version"].value for c in evaluations} == {cleaning["after_version"]}


def test_checks_of_a_partition_never_cleaned_say_so(env):
    _store, resources, instance = env
    result = _rerun_checks("users-0", resources, instance)
    assert not result.success
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "materialize compacted_log for this partition first" in failure.event_specific_data.error.message
