"""Shared fixtures: one local Spark session for the whole test session; a fresh store per test."""

from __future__ import annotations

import gc
import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config


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


def real_server_unavailable(name: str, why: object) -> None:
    """A real server a test needs cannot start: under CI=true that fails the test (CI must run the real
    systems), elsewhere the test skips saying why. One line, naming the server."""
    message = f"{name} cannot start here: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires it: {message}", pytrace=False)
    pytest.skip(message)


DUCKDB_PYTHON = Path(__file__).resolve().parents[1] / ".venv-duckdb" / "bin" / "python"


@pytest.fixture(scope="session")
def duckdb_python() -> Path:
    """The python of .venv-duckdb, DuckDB with its own Iceberg reader (scripts/setup-duckdb-iceberg.sh); a
    missing one skips the test with the command that creates it, and fails it under CI=true (scripts/test.sh
    creates it, so there it must exist)."""
    if DUCKDB_PYTHON.exists():
        return DUCKDB_PYTHON
    why = ".venv-duckdb/bin/python is missing: run `bash scripts/setup-duckdb-iceberg.sh` to create it"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true requires DuckDB's Iceberg reader: {why}", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 server (SeaweedFS) for the session; when it cannot start, tests that need it skip saying
    why, and fail under CI=true."""
    from tests.s3_server import start_s3_server

    try:
        server = start_s3_server()
    except (RuntimeError, OSError) as exc:
        real_server_unavailable("the S3 server (SeaweedFS `weed`)", exc)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on loopback (tests/pg_server.py); skips saying why when it cannot start,
    fails under CI=true."""
    from tests.pg_server import start_postgres

    try:
        server = start_postgres()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        real_server_unavailable("PostgreSQL", exc)
    yield server
    server.stop()


@pytest.fixture
def s3_store_uri(s3_server, monkeypatch):
    """`s3://<fresh bucket>/store` with the server's endpoint and keys in the environment, as a user sets them."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return f"s3://{s3_server.new_bucket()}/store"


@cache
def _uses_dagster(path: str) -> bool:
    return "dagster" in Path(path).read_text()


@pytest.fixture(autouse=True)
def _entered_dagster_instance(request):
    """Dagster builds definitions against the instance entered last in this process (a context variable);
    one that an earlier test entered and disposed would break the next `materialize`. Each test module that
    uses Dagster runs its tests inside an entered ephemeral instance of their own (public API only).

    An instance entered and never exited (a sensor context built from an `instance_ref` and not closed)
    resets that variable when the garbage collector finalizes it, to whatever it was when it was entered:
    at a random later moment, in a later test, to an instance long gone. Collecting at the end of each test,
    while its own instance is still entered, makes such a reset happen here, where the exit below undoes it."""
    if not _uses_dagster(str(request.path)):
        yield
        return
    import dagster as dg

    with dg.DagsterInstance.ephemeral():
        yield
        gc.collect()
