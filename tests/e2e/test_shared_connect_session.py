"""Runs reaching one Spark Connect server share a server session per hour (compaction_assets.spark).

The session id is derived from the endpoint and the hour, so separate processes agree on it; an id
that SPARK_REMOTE names is kept. A real server (scripts/spark-connect.sh's way, tests/cluster_helpers.py)
shows that two processes land in the same session, and that after one releases it (as PySpark does at
exit under SPARK_CONNECT_RELEASE_SESSION_ON_EXIT) the next run still gets a session of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compaction_assets import settings
from compaction_assets.spark import SHARED_SESSION_SECONDS, shared_session_remote
from tests import cluster_helpers as ch

ROOT = Path(__file__).resolve().parents[2]


def _session_of(url: str) -> str:
    return url.split("session_id=", 1)[1].split(";", 1)[0]


def test_the_shared_session_depends_on_the_endpoint_and_the_hour():
    hour = SHARED_SESSION_SECONDS
    a = shared_session_remote("sc://127.0.0.1:15002", 10 * hour + 5)
    assert a.startswith("sc://127.0.0.1:15002/;session_id=")
    assert a == shared_session_remote("sc://127.0.0.1:15002/", 11 * hour - 1)  # same hour, same id
    assert _session_of(a) != _session_of(shared_session_remote("sc://127.0.0.1:15002", 11 * hour))
    assert _session_of(a) != _session_of(shared_session_remote("sc://127.0.0.1:15003", 10 * hour))
    # parameters stay; an id the user gave is kept as it is
    with_token = shared_session_remote("sc://h:15002/;token=abc", 0)
    assert with_token.startswith("sc://h:15002/;token=abc;session_id=")
    named = "sc://h:15002/;session_id=00000000-0000-0000-0000-000000000001"
    assert shared_session_remote(named, 0) == named


# one process: the product's session, one query, its session id and a setting as JSON; `stop` releases it
PROBE = (
    "import json, sys; from compaction_assets.spark import get_spark; s = get_spark(); "
    "n = s.range(5).count(); print(json.dumps({'session': s.session_id, 'count': n, "
    "'partitions': s.conf.get('spark.sql.shuffle.partitions')})); "
    "(s.stop() if sys.argv[1:] == ['stop'] else None)"
)


def _probe(tmp: Path, remote: str, *args: str, **env: str) -> dict:
    base = {
        k: v
        for k, v in ch.base_env(tmp).items()
        if k not in (settings.SHARED_CONNECT_SESSION, settings.SPARK_CONNECT_RELEASE_SESSION_ON_EXIT)
    }
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**base, settings.SPARK_REMOTE: remote, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.ci_real
@pytest.mark.skipif(ch.java_skip(), reason=str(ch.java_missing_reason()))
def test_runs_share_a_server_session_and_survive_its_release(request, tmp_path):
    server = ch.ConnectServer(tmp_path / "connect", master="local[2]")
    request.addfinalizer(server.stop)
    remote = server.start().url
    before = _session_of(shared_session_remote(remote, time.time()))
    first, second = _probe(tmp_path, remote), _probe(tmp_path, remote, "stop")
    after = _session_of(shared_session_remote(remote, time.time()))
    assert first["session"] in (before, after) and (second["session"] == first["session"] or before != after)
    assert first["count"] == second["count"] == 5 and first["partitions"] == "8"  # the product's settings
    # the shared session was released: the next run opens one of its own, and works
    third = _probe(tmp_path, remote)
    assert third["session"] != second["session"] and third["count"] == 5 and third["partitions"] == "8"
    # opting out, and PySpark's release at exit, give each run its own session
    own = _probe(tmp_path, remote, **{settings.SHARED_CONNECT_SESSION: "0"})
    releasing = _probe(tmp_path, remote, **{settings.SPARK_CONNECT_RELEASE_SESSION_ON_EXIT: "true"})
    assert len({own["session"], releasing["session"], third["session"], second["session"]}) == 4
