"""The table tests' Dagster set-up: a store, landing and latest-state folder under the test's folder, the
resources a run takes, and an instance with the partition `users-0`."""

from __future__ import annotations

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets.defs.partitions import log_partitions
from resources.log_store import LogStoreResource


@pytest.fixture
def env(tmp_path, spark):
    store = LogStoreResource(
        root=str(tmp_path / "store"), landing=str(tmp_path / "landing"), latest_state_root=str(tmp_path / "latest")
    )
    resources = {"log_store": store, "pyspark": LazyPySparkResource(spark_config={})}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, ["users-0"])
        yield tmp_path, store, resources, instance
