"""`scripts/ui.sh` refuses before it starts anything when its port is taken or another ui.sh serves the same
Dagster instance, and on Ctrl-C stops only what it started (issue 57): a Spark Connect server that was
already running, a real one here, is used and left running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compaction_assets import settings
from tests import cluster_helpers as ch

ROOT = Path(__file__).resolve().parents[2]
UI = str(ROOT / "scripts" / "ui.sh")
CONNECT = str(ROOT / "scripts" / "spark-connect.sh")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """ui.sh's environment: its own instance, Spark Connect folder and ports (nothing shared with a real UI)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (settings.SPARK_REMOTE, settings.SPARK_MASTER, "PORT", "HOST", "DAGSTER_HOME")
    }
    env.update(
        DAGSTER_HOME=str(tmp_path / "home"),
        SPARK_CONNECT_DIR=str(tmp_path / "connect"),
        SPARK_CONNECT_PORT=str(ch.free_port()),
        SPARK_CONNECT_MASTER="local[1]",
        SPARK_CONNECT_WARM_UP="0",
        PORT=str(ch.free_port()),
    )
    env.update(extra)
    return env


def _connect(command: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", CONNECT, command], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@contextmanager
def _ui(env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """ui.sh running in a session of its own; whatever is left of it (the UI, its daemon) is killed after."""
    proc = subprocess.Popen(
        ["bash", UI],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()


def _finished(proc: subprocess.Popen, seconds: float) -> tuple[int | None, str]:
    """The exit code and stderr of a ui.sh that should end by itself (None: still running after `seconds`)."""
    try:
        _, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        return None, ""
    return proc.returncode, err


def test_a_busy_port_is_refused_before_anything_starts(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        env = _env(tmp_path, PORT=str(busy.getsockname()[1]))
        try:
            with _ui(env) as proc:
                rc, err = _finished(proc, 60)
        finally:
            connect_status = _connect("status", env).returncode
            _connect("stop", env)
    assert rc == 1, f"ui.sh ended with {rc} (None: kept running with its port taken): {err}"
    assert err.strip().splitlines() == [
        f"ui.sh: port {env['PORT']} on 127.0.0.1 is in use (another UI?); nothing was started. Stop what holds it, "
        "or set PORT"
    ], err
    assert connect_status == 1, "no Spark Connect server may have been started"
    assert not (tmp_path / "home").exists(), "no instance may have been touched"


def test_a_second_ui_on_the_same_instance_is_refused(tmp_path):
    env = _env(tmp_path)
    home = tmp_path / "home"
    home.mkdir()
    # a running ui.sh (a shell whose command line names it) recorded on the instance
    first = subprocess.Popen(["bash", "-c", "sleep 60; true", "ui.sh"], start_new_session=True)
    try:
        (home / "ui.sh.pid").write_text(f"{first.pid}\n")
        with _ui(env) as proc:
            rc, err = _finished(proc, 60)
    finally:
        first.kill()
        first.wait()
        _connect("stop", env)
    assert rc == 1, f"ui.sh ended with {rc} (None: kept running): {err}"
    assert f"another ui.sh (pid {first.pid}) serves the instance" in err, err
    assert (home / "ui.sh.pid").read_text().strip() == str(first.pid), "the other UI's record is left alone"


def test_ctrl_c_leaves_running_a_spark_connect_server_it_did_not_start(tmp_path):
    env = _env(tmp_path)
    started = _connect("start", env)  # another UI's (or the operator's) server
    assert started.returncode == 0, started.stderr
    try:
        remote = started.stdout.strip()
        with _ui(env) as proc:
            assert proc.stderr is not None
            used = next(line for line in proc.stderr if line.startswith("ui.sh:"))  # its line: which server
            assert used.strip() == (
                f"ui.sh: using the Spark Connect server already running at {remote} (not stopped with the UI)"
            ), used
            time.sleep(2)  # the UI starting
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole foreground group
            proc.wait(timeout=120)
        assert _connect("status", env).stdout.strip() == remote, "the server ui.sh did not start must keep running"
        assert not (tmp_path / "home" / "ui.sh.pid").exists(), "the script's own record is removed on exit"
    finally:
        _connect("stop", env)
