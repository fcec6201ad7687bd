"""Secrets never shown: S3 keys, the webhook token, a catalog's password, a Spark Connect token and a
PostgreSQL password appear in no output, log, error, Dagster event or metadata.

Each error is provoked for real: a PostgreSQL catalog URI whose password cannot be tried (nothing listens
on its port), an S3 endpoint where nothing listens while the secret key is set, a Spark Connect URL with a
token that is not a Connect URL. Real CLI processes are run and their stdout and stderr scanned; real
Dagster runs are made and every event of the instance (errors with their stacks, metadata, the run itself)
serialized and scanned, with the Python log of the run.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets import settings
from compaction_assets.defs.assets import raw_segments
from compaction_assets.defs.partitions import log_partitions
from resources.log_store import LogStoreResource
from tests import cluster_helpers as ch
from tests.defs.test_dagster import materialize

ROOT = Path(__file__).resolve().parents[2]
CATALOG_PASSWORD = "catalog-pw-Hy7eQ2-never-shown"
PG_PASSWORD = "pg-pw-Tn5vL0-never-shown"
S3_KEY_ID = "s3-key-id-Mv2yTr-never-shown"
S3_SECRET = "s3-secret-Zq81xPw-never-shown"
S3_SESSION = "s3-session-Ua6cKd-never-shown"
HOOK_TOKEN = "hook-token-Rk4nB9-never-shown"
CONNECT_TOKEN = "connect-token-Wm3sJ6-never-shown"
SECRETS = (CATALOG_PASSWORD, PG_PASSWORD, S3_KEY_ID, S3_SECRET, S3_SESSION, HOOK_TOKEN, CONNECT_TOKEN)


def shown(text: str) -> list[str]:
    """The secrets that `text` shows."""
    return [secret for secret in SECRETS if secret in text]


def secret_env(closed_port: int) -> dict[str, str]:
    """Every secret the product may be given, set as a deployment sets them."""
    return {
        settings.AWS_ACCESS_KEY_ID: S3_KEY_ID,
        settings.AWS_SECRET_ACCESS_KEY: S3_SECRET,
        settings.AWS_SESSION_TOKEN: S3_SESSION,
        settings.AWS_ENDPOINT_URL: f"http://127.0.0.1:{closed_port}",
        settings.AWS_ALLOW_HTTP: "true",
        settings.AWS_REGION: "us-east-1",
        settings.ALERT_WEBHOOK_TOKEN: HOOK_TOKEN,
        "DAGSTER_PG_URL": f"postgresql+psycopg2://dagster:{PG_PASSWORD}@127.0.0.1:{closed_port}/dagster",
    }


def catalog_uri(closed_port: int) -> str:
    return f"postgresql+psycopg2://compaction:{CATALOG_PASSWORD}@127.0.0.1:{closed_port}/catalog"


@pytest.fixture
def local_log(tmp_path) -> tuple[dict[str, str], Path]:
    """A local store holding log t-0 (no table yet), a landed file, and an environment with every secret."""
    env = {k: v for k, v in os.environ.items() if k not in (settings.SPARK_REMOTE, settings.SPARK_MASTER)}
    env[settings.STORE] = str(tmp_path / "store")
    env[settings.TABLES] = "0"
    data = tmp_path / "a.jsonl"
    data.write_text(json.dumps({"key": "k", "value": "v", "timestamp": 1}) + "\n")
    made = cli(env, "append", "t-0", str(data))
    assert made.returncode == 0, made.stderr
    env.update(secret_env(ch.free_port()))
    del env[settings.TABLES]
    return env, data


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "compaction_assets", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_a_catalog_password_is_in_no_output_of_the_cli(local_log):
    env, data = local_log
    env[settings.TABLE_CATALOG_URI] = catalog_uri(ch.free_port())
    for command in (["table", "show", "t"], ["append", "t-0", str(data)], ["table", "commit", "t-0"]):
        done = cli(env, *command)
        output = done.stdout + done.stderr
        assert "cannot reach the table" in output, (command, output)  # the error did happen
        assert "127.0.0.1" in output  # and names where the catalog is
        assert shown(output) == [], (command, output)


def test_a_spark_connect_token_is_in_no_output_of_the_cli(local_log):
    env, _data = local_log
    env[settings.SPARK_REMOTE] = f"sc:/127.0.0.1:{ch.free_port()}/;token={CONNECT_TOKEN}"  # sc:/ is no Connect URL
    done = cli(env, "clean", "t-0", "--force")
    output = done.stdout + done.stderr
    assert "not a Spark Connect URL" in output and done.returncode != 0, output
    assert shown(output) == [], output


def test_s3_keys_are_in_no_output_of_the_cli(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in (settings.SPARK_REMOTE, settings.SPARK_MASTER)}
    env.update(secret_env(ch.free_port()))
    env[settings.STORE] = "s3://bucket/store"
    data = tmp_path / "a.jsonl"
    data.write_text(json.dumps({"key": "k", "value": "v", "timestamp": 1}) + "\n")
    for command in (["logs"], ["describe", "t-0"], ["append", "t-0", str(data)], ["table", "show", "t"]):
        done = cli(env, *command)
        output = done.stdout + done.stderr
        assert done.returncode != 0 and "s3://bucket/store" in output, (command, output)
        assert shown(output) == [], (command, output)


def settings_repr_env() -> dict[str, str]:
    return {
        **secret_env(9),
        settings.TABLE_CATALOG_URI: catalog_uri(9),
        settings.SPARK_REMOTE: f"sc://127.0.0.1:9/;use_ssl=true;token={CONNECT_TOKEN}",
    }


def test_the_settings_and_the_catalog_location_show_no_secret(tmp_path):
    from compaction_assets.store.fs import Storage
    from compaction_assets.table.catalog import locate

    env = settings_repr_env()
    current = settings.current(env)
    assert current.tables.catalog_uri == catalog_uri(9) and current.alert_webhook_token == HOOK_TOKEN
    assert "127.0.0.1:9" in repr(current)
    assert shown(repr(current)) == [], repr(current)
    location = locate(Storage.open(str(tmp_path)), current.tables)
    assert shown(repr(location) + location.describe()) == [], repr(location)
    assert "compaction:***@127.0.0.1" in location.describe()


# --- Dagster: real runs on a real instance, every event scanned -------------------------------------------


def scan_run(instance: dg.DagsterInstance, run_id: str) -> str:
    """Everything the instance keeps of a run: each event serialized (messages, errors with their stacks and
    causes, metadata), and the run itself (its config and tags)."""
    events = [dg.serialize_value(entry) for entry in instance.all_logs(run_id)]
    return "\n".join([*events, dg.serialize_value(instance.get_run_by_id(run_id))])


def land(tmp_path: Path) -> None:
    folder = tmp_path / "landing" / "t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "a.jsonl").write_text(json.dumps({"key": "k", "value": "v", "timestamp": 1}) + "\n")


def ingest_run(tmp_path: Path, root: str, caplog) -> tuple[dg.ExecuteInProcessResult, str]:
    land(tmp_path)
    resources = {
        "log_store": LogStoreResource(
            root=root,
            landing=str(tmp_path / "landing"),
            topics_file=None,
            latest_state_root=str(tmp_path / "latest"),
        ),
        "pyspark": LazyPySparkResource(spark_config={}),
    }
    caplog.set_level(logging.DEBUG)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(log_partitions.name, ["t-0"])
        result = materialize([raw_segments], "t-0", resources, instance, raise_on_error=False)
        return result, scan_run(instance, result.run_id) + "\n" + caplog.text


def test_a_catalog_password_is_in_no_dagster_event(tmp_path, monkeypatch, caplog):
    port = ch.free_port()
    for name, value in {**secret_env(port), settings.TABLE_CATALOG_URI: catalog_uri(port)}.items():
        monkeypatch.setenv(name, value)
    result, kept = ingest_run(tmp_path, str(tmp_path / "store"), caplog)
    assert "cannot reach the table" in kept, kept[-3000:]  # the error happened, and was recorded
    assert shown(kept) == [], [line for line in kept.splitlines() if shown(line)][:3]
    assert result.run_id in kept


def test_s3_keys_are_in_no_dagster_event(tmp_path, monkeypatch, caplog):
    for name, value in secret_env(ch.free_port()).items():
        monkeypatch.setenv(name, value)
    result, kept = ingest_run(tmp_path, "s3://bucket/store", caplog)
    assert not result.success
    assert "s3://bucket/store" in kept, kept[-3000:]
    assert shown(kept) == [], [line for line in kept.splitlines() if shown(line)][:3]


@pytest.mark.ci_real
def test_postgresql_passwords_are_in_no_event_of_a_postgresql_instance(tmp_path, postgres_server, monkeypatch, caplog):
    """The production instance on a real PostgreSQL (its password in DAGSTER_PG_URL, as docs/deployment.md
    says), and a table catalog on that same server with a wrong password: the catalog's error comes from the
    server itself (authentication failed). Neither password is in any event the instance keeps."""
    from tests.defs.test_postgres_instance import deployment_yaml
    from tests.pg_server import PASSWORD

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(deployment_yaml())
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_server.url)
    wrong = postgres_server.url.replace(f":{PASSWORD}@", f":{CATALOG_PASSWORD}@")
    assert wrong != postgres_server.url
    monkeypatch.setenv(settings.TABLE_CATALOG_URI, wrong)
    land(tmp_path)
    resources = {
        "log_store": LogStoreResource(
            root=str(tmp_path / "store"),
            landing=str(tmp_path / "landing"),
            topics_file=None,
            latest_state_root=str(tmp_path / "latest"),
        ),
        "pyspark": LazyPySparkResource(spark_config={}),
    }
    caplog.set_level(logging.DEBUG)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        instance.add_dynamic_partitions(log_partitions.name, ["t-0"])
        result = materialize([raw_segments], "t-0", resources, instance, raise_on_error=False)
        kept = scan_run(instance, result.run_id) + "\n" + caplog.text
    assert result.success  # the log was ingested; its table waits for a catalog that lets it in
    assert "cannot reach the table" in kept and "password authentication failed" in kept, kept[-3000:]
    leaks = [line for line in kept.splitlines() if PASSWORD in line or CATALOG_PASSWORD in line]
    assert leaks == [], leaks[:3]
