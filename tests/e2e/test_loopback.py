"""The UI and the Spark Connect server listen on loopback only, unless told otherwise (docs/deployment.md,
"Exposing the UI and the Connect server"): `scripts/ui.sh` is run for real and every TCP port that any
process it started listens on is looked at (the webserver, the daemon, code servers); the Connect server's
JVM is looked at by tests/e2e/test_connect_script.py with `listening_addresses` below.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from compaction_assets import settings
from tests import cluster_helpers as ch

ROOT = Path(__file__).resolve().parents[2]
LOOPBACK = ("127.0.0.1", "::1")
START_TIMEOUT_S = 300  # setup.sh's check, then `dg dev` loading the code location, on a loaded machine


def listening_addresses(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket that process `pid` or any process below it listens on (an IPv4
    address as itself, also when a Java socket reports it IPv4-mapped: ::ffff:127.0.0.1)."""
    root = psutil.Process(pid)
    found = set()
    for process in [root, *root.children(recursive=True)]:
        try:
            found.update(
                (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
                for c in process.net_connections("inet")
                if c.status == psutil.CONN_LISTEN
            )
        except psutil.NoSuchProcess:
            continue
    return found


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def stop_session(proc: subprocess.Popen) -> None:
    """Stop every process of the script's own session: TERM, then KILL what is left after a grace."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # `dg dev`'s webserver outlives a TERM for a while
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


@pytest.mark.ci_real
def test_the_ui_script_listens_on_loopback_only(tmp_path):
    port = ch.free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("HOST", settings.SPARK_REMOTE, settings.SPARK_MASTER)}
    env.update(
        SPARK_CONNECT="0",  # the Connect server's own binding is test_connect_script's
        PORT=str(port),
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        COMPACTION_STORE=str(tmp_path / "store"),
        COMPACTION_LANDING=str(tmp_path / "landing"),
    )
    log = tmp_path / "ui.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "scripts/ui.sh"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not answers(f"http://127.0.0.1:{port}/server_info"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        addresses = listening_addresses(proc.pid)
    finally:
        stop_session(proc)
    assert ("127.0.0.1", port) in addresses, addresses
    assert {address for address, _ in addresses} <= set(LOOPBACK), addresses


def test_the_scan_sees_a_port_open_to_every_address():
    """The check above can fail: a server bound to every address (for a second) is seen as such."""
    port = ch.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "0.0.0.0", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while not answers(f"http://127.0.0.1:{port}/"):
            assert time.monotonic() < deadline and server.poll() is None
            time.sleep(0.2)
        assert listening_addresses(server.pid) == {("0.0.0.0", port)}
    finally:
        server.kill()
        server.wait()
