"""The driver JVM's quick start: C1 only and the class-data archive that `scripts/setup.sh` builds.

The options are derived from the settings (on by default, off with COMPACTION_JVM_QUICK_START=0, the
archive only when it exists for this Java and PySpark); a real archive is built from scratch into a
temporary folder, and a real session in a fresh process starts with it and prints nothing of the JVM's
on stdout (commands print JSON there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compaction_assets import settings
from compaction_assets.spark import (
    class_archive_path,
    connect_server_java_options,
    driver_java_options,
    spark_conf_from_env,
)

ROOT = Path(__file__).resolve().parents[2]
# A fresh process: start the product's session, run a job, print the JVM's arguments as one JSON line.
SESSION = (
    "import json; from compaction_assets.spark import get_spark; s = get_spark(); "
    "jvm = s.sparkContext._jvm; args = list(jvm.java.lang.management.ManagementFactory"
    ".getRuntimeMXBean().getInputArguments()); n = s.range(10).count(); "
    "print(json.dumps({'args': args, 'count': n}))"
)


def _env(**extra: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (settings.SPARK_REMOTE, settings.SPARK_MASTER, settings.JVM_QUICK_START, settings.JVM_ARCHIVE_DIR)
    }
    env.update(extra)
    return env


def test_options_follow_the_settings(tmp_path):
    env = settings.current(_env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path)}))
    archive = class_archive_path(env)
    assert archive is not None and archive.startswith(str(tmp_path)) and archive.endswith(".jsa")
    without = driver_java_options(env)
    assert "-XX:TieredStopAtLevel=1" in without and "SharedArchiveFile" not in without
    assert "-Dlog4j.configurationFile=" in without and "-Xlog:all=warning:stderr" in without

    Path(archive).write_bytes(b"")  # present: used
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options(env)
    assert f"-XX:ArchiveClassesAtExit={tmp_path}/x.jsa" in driver_java_options(env, dump_archive_to=f"{tmp_path}/x.jsa")

    off = settings.current(_env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path), settings.JVM_QUICK_START: "0"}))
    assert driver_java_options(off).split() == [
        f"-Dlog4j.configurationFile=file:{ROOT}/compaction_assets/spark/log4j2.properties"
    ]
    # no Java where JAVA_HOME points: no archive to name (nor to use)
    other = settings.current(_env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path), settings.JAVA_HOME: "/nonexistent"}))
    assert class_archive_path(other) is None


def test_a_connect_servers_options_follow_the_settings(tmp_path):
    """The server that scripts/spark-connect.sh starts runs the fast compiler only unless the quick start
    is off, and never maps the driver's class-data archive (its class path differs)."""
    env = settings.current(_env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path)}))
    Path(class_archive_path(env)).write_bytes(b"")
    options = connect_server_java_options(env).split()
    assert "-XX:TieredStopAtLevel=1" in options and not [o for o in options if "SharedArchiveFile" in o]
    assert f"-Dlog4j.configurationFile=file:{ROOT}/compaction_assets/spark/log4j2.properties" in options
    off = settings.current(_env(**{settings.JVM_QUICK_START: "0"}))
    assert connect_server_java_options(off).split() == [
        f"-Dlog4j.configurationFile=file:{ROOT}/compaction_assets/spark/log4j2.properties"
    ]


def test_a_connect_client_sets_no_jvm_options(monkeypatch):
    monkeypatch.setenv(settings.SPARK_REMOTE, "sc://127.0.0.1:15002")
    assert "spark.driver.extraJavaOptions" not in spark_conf_from_env()
    monkeypatch.delenv(settings.SPARK_REMOTE)
    assert "-XX:TieredStopAtLevel=1" in spark_conf_from_env()["spark.driver.extraJavaOptions"]


def test_a_built_archive_is_used_by_a_fresh_session_and_the_jvm_stays_off_stdout(tmp_path):
    env = _env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path / "jvm")})
    built = subprocess.run(
        [sys.executable, "-m", "compaction_assets.warm_start.jvm_archive"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    assert built.stdout == "" and "jvm-archive: built" in built.stderr
    archives = list((tmp_path / "jvm").iterdir())
    assert len(archives) == 1 and archives[0].suffix == ".jsa" and archives[0].stat().st_size > 10 * 2**20

    again = subprocess.run(
        [sys.executable, "-m", "compaction_assets.warm_start.jvm_archive"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 0 and "up to date" in again.stderr

    run = subprocess.run(
        [sys.executable, "-c", SESSION], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1, f"the JVM wrote to stdout: {run.stdout!r}"
    out = json.loads(lines[0])
    assert out["count"] == 10
    assert f"-XX:SharedArchiveFile={archives[0]}" in out["args"] and "-XX:TieredStopAtLevel=1" in out["args"]


def test_quick_start_off_builds_no_archive(tmp_path):
    """Off, no JVM maps an archive: scripts/setup.sh's build runs no JVM and writes nothing (a clone's
    setup, tests/e2e/test_clone_alone.py, would otherwise build one for its own class path)."""
    env = _env(**{settings.JVM_ARCHIVE_DIR: str(tmp_path / "jvm"), settings.JVM_QUICK_START: "0"})
    built = subprocess.run(
        [sys.executable, "-m", "compaction_assets.warm_start.jvm_archive"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0 and "COMPACTION_JVM_QUICK_START is off; nothing to build" in built.stderr
    assert not (tmp_path / "jvm").exists()


@pytest.mark.parametrize("value", ["0", "false"])
def test_quick_start_off_starts_a_plain_jvm(value):
    run = subprocess.run(
        [sys.executable, "-c", SESSION],
        cwd=ROOT,
        env=_env(**{settings.JVM_QUICK_START: value}),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    args = json.loads(run.stdout.splitlines()[-1])["args"]
    assert not [a for a in args if a.startswith(("-XX:TieredStopAtLevel", "-XX:SharedArchiveFile"))]
