"""Shared fixtures: one local Spark session for the whole test session; a fresh store per test."""

from __future__ import annotations

import pytest

from compaction_assets.log.config import build_config
from compaction_assets.log.store import LogStore


@pytest.fixture(scope="session")
def spark():
    from compaction_assets.spark import get_spark, spark_conf_from_env

    session = get_spark(spark_conf_from_env({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"}))
    yield session
    session.stop()


@pytest.fixture
def store(tmp_path):
    return LogStore(str(tmp_path / "store"), gc_grace_s=0)


@pytest.fixture
def make_config():
    return lambda **kw: build_config({k.replace("_", "."): v for k, v in kw.items()})
