"""`scripts/spark-connect.sh`, as `scripts/ui.sh` and the benchmark run it: a real server on 127.0.0.1.

`start` prints only the SPARK_REMOTE to use, once the server answers and its warm-up ran; the server's JVM
carries the options the settings give (`spark.connect_server_java_options`); a client reaches it;
`status` answers while it runs and fails once `stop` ended it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from compaction_assets import settings
from compaction_assets.spark import connect_server_java_options
from tests import cluster_helpers as ch
from tests.e2e.test_loopback import LOOPBACK, listening_addresses

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "spark-connect.sh")
# a fresh client process: the product's session on SPARK_REMOTE, one small query
CLIENT = (
    "from compaction_assets.spark import get_spark; "
    "print(get_spark().range(7).selectExpr('sum(id) AS s').collect()[0]['s'])"
)


def _script(command: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_start_warms_up_a_server_the_product_reaches_and_stop_ends_it(request, tmp_path):
    port = ch.free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (settings.SPARK_REMOTE, settings.SPARK_MASTER, settings.JVM_QUICK_START)
    }
    env.update(
        SPARK_CONNECT_PORT=str(port), SPARK_CONNECT_DIR=str(tmp_path / "connect"), SPARK_CONNECT_MASTER="local[2]"
    )
    request.addfinalizer(lambda: _script("stop", env))

    started = _script("start", env)
    remote = f"sc://127.0.0.1:{port}"
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == remote and started.stderr == ""
    warm = (tmp_path / "connect" / "logs" / "warm-up.log").read_text()
    assert "warm-up: done in" in warm, warm

    pids = list((tmp_path / "connect").glob("*SparkConnectServer*.pid"))
    assert len(pids) == 1
    args = Path(f"/proc/{int(pids[0].read_text().strip())}/cmdline").read_bytes().decode().split("\0")
    options = connect_server_java_options(settings.current(env)).split()
    assert "-XX:TieredStopAtLevel=1" in options and all(o in args for o in options), args
    # every port of the server (Connect's gRPC, the driver's RPC and block manager) on loopback only
    addresses = listening_addresses(int(pids[0].read_text().strip()))
    assert ("127.0.0.1", port) in addresses and {a for a, _ in addresses} <= set(LOOPBACK), addresses

    client = subprocess.run(
        [sys.executable, "-c", CLIENT],
        cwd=ROOT,
        env={**env, settings.SPARK_REMOTE: remote},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert client.returncode == 0 and client.stdout.strip() == "21", client.stderr
    assert _script("status", env).stdout.strip() == remote
    again = _script("start", env)  # already running: the same address, no second server
    assert again.stdout.strip() == remote and len(list((tmp_path / "connect").glob("*.pid"))) == 1

    _script("stop", env)
    assert _script("status", env).returncode == 1
