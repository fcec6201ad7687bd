"""Helpers for the UI tests: run the demo, start and stop `dagster dev` on loopback, query GraphQL.

Every process is started in its own session (so its own process group) with SIGINT/SIGTERM reset to
their defaults before exec: a process started from a background job may inherit them ignored, and
then `dagster dev` would not stop on SIGINT. Stopping sends SIGINT, waits, then SIGKILLs whatever is
left of the group, whatever happened before.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"
# Runs argv[1:] with SIGINT and SIGTERM at their default actions (an exec keeps "ignored" but not handlers).
RESET_SIGNALS_AND_EXEC = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.signal(signal.SIGTERM, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])"
)
# Loopback only, and never through a proxy from the environment.
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start(argv: list[str], *, env: dict, cwd: str | Path, log: Path) -> subprocess.Popen:
    """Start argv in a new session (process group id == pid), output to `log`."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-c", RESET_SIGNALS_AND_EXEC, *argv],
            env=env,
            cwd=str(cwd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group `pgid`, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state ppid pgrp ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            out.append(int(entry))
    return out


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def stop(proc: subprocess.Popen, *, grace_s: float = 60, stragglers_s: float = 20) -> None:
    """SIGINT the leader, wait for it, give its group a moment, then SIGKILL what is left of the group."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    try:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        wait_group_gone(pgid, stragglers_s)
    finally:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def tail(path: Path, chars: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "<no log>"


def http_get(url: str, timeout: float = 5) -> bytes:
    with _http.open(url, timeout=timeout) as resp:
        return resp.read()


def graphql(base_url: str, query: str, variables: dict | None = None, timeout: float = 60) -> dict:
    req = urllib.request.Request(
        f"{base_url}/graphql",
        method="POST",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with _http.open(req, timeout=timeout) as resp:
        body = json.loads(resp.read())
    if body.get("errors"):
        raise AssertionError(f"GraphQL errors: {json.dumps(body['errors'])[:2000]}")
    return body["data"]


LOCATIONS = """{ workspaceOrError { __typename
  ... on Workspace { locationEntries { name loadStatus
      locationOrLoadError { __typename ... on PythonError { message stack } } } }
  ... on PythonError { message } } }"""


def wait_until_ready(proc: subprocess.Popen, base_url: str, log: Path, timeout_s: float = 240) -> dict:
    """Wait for /server_info, then for every code location to finish loading; return server_info."""
    deadline = time.monotonic() + timeout_s
    info = None
    while info is None:
        if proc.poll() is not None:
            raise AssertionError(f"dagster dev exited with {proc.returncode} before serving:\n{tail(log)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"dagster dev did not answer /server_info in {timeout_s:.0f} s:\n{tail(log)}")
        try:
            info = json.loads(http_get(f"{base_url}/server_info"))
        except (urllib.error.URLError, OSError, ValueError):
            time.sleep(0.5)
    while True:
        ws = graphql(base_url, LOCATIONS)["workspaceOrError"]
        assert ws["__typename"] == "Workspace", f"workspace failed to load: {ws}"
        entries = ws["locationEntries"]
        if entries and all(e["loadStatus"] == "LOADED" for e in entries):
            for e in entries:
                loaded = e["locationOrLoadError"] or {}
                assert loaded.get("__typename") == "RepositoryLocation", (
                    f"code location {e['name']} failed to load: {loaded.get('message')}\n{loaded.get('stack')}"
                )
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"code locations still loading after {timeout_s:.0f} s: {entries}\n{tail(log)}")
        time.sleep(0.5)
