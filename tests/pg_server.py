"""A real PostgreSQL server for tests (the production Dagster instance's storage), on loopback.

`initdb` into a fresh temporary folder with a password (scram-sha-256), a free port, the socket in that
folder, and a database `dagster`. PostgreSQL refuses to run as root: when we are root the server's
programs run as the unprivileged `postgres` user (Debian's package creates it), else as `nobody`, and the
folder is given to that user. Stopping is `pg_ctl stop -m immediate`, then the folder goes.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

USER = "dagster"
PASSWORD = "dagster-test-password"
DB = "dagster"
START_TIMEOUT_S = 120


def pg_bin_dir() -> str | None:
    """The folder of initdb, pg_ctl and postgres: Debian's newest, else the one of `initdb` on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        found.append(os.path.dirname(os.path.realpath(on_path)))
    for folder in found:
        if all(os.access(os.path.join(folder, p), os.X_OK) for p in ("initdb", "pg_ctl", "postgres")):
            return folder
    return None


def _run_as() -> str | None:
    """The unprivileged user the server runs as when we are root; None when we are not root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("PostgreSQL cannot run as root and there is no `postgres` or `nobody` user")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    """One running server; `url` is the SQLAlchemy URL of its `dagster` database (psycopg2 driver)."""

    bin_dir: str
    folder: str
    port: int
    user: str | None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DB}"

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(os.path.join(self.folder, "server.log"), errors="replace") as fh:
                return " | ".join(fh.read().splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def run(self, *args: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess:
        """One of the server's programs, as the unprivileged user when we are root."""
        cmd = [os.path.join(self.bin_dir, args[0]), *args[1:]]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def new_database(self, name: str) -> str:
        """Create database `name` on this server (an instance of its own for one test); its URL."""
        _create_database(self, name)
        return self.url.rsplit("/", 1)[0] + f"/{name}"

    def kill(self) -> None:
        """SIGKILL the postmaster, as a crash would; its backends exit when they see it gone."""
        with open(os.path.join(self.folder, "data", "postmaster.pid")) as fh:
            pid = int(fh.readline().strip())
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def restart(self, timeout: float = START_TIMEOUT_S) -> None:
        """Start the server again on its folder and port (crash recovery replays its WAL). Right after a
        kill the old backends may still hold the shared memory for a moment: tried again until `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                _start(self)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def stop(self) -> None:
        self.run("pg_ctl", "-D", os.path.join(self.folder, "data"), "-m", "immediate", "-w", "stop", timeout=60)
        shutil.rmtree(self.folder, ignore_errors=True)


def start_postgres() -> PostgresServer:
    """initdb, start and create the database; raise RuntimeError saying why not."""
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL's server programs (initdb, pg_ctl, postgres) are missing (apt-get install postgresql)"
        )
    user = _run_as()
    folder = tempfile.mkdtemp(prefix="pg-server-")
    server = PostgresServer(bin_dir, folder, _free_port(), user)
    with open(os.path.join(folder, "pwfile"), "w") as fh:
        fh.write(PASSWORD + "\n")
    if user:
        entry = pwd.getpwnam(user)
        for path in (folder, os.path.join(folder, "pwfile")):
            os.chown(path, entry.pw_uid, entry.pw_gid)
    try:
        _init_and_start(server)
        _create_database(server)
    except BaseException:
        server.stop()
        raise
    return server


def _init_and_start(server: PostgresServer) -> None:
    data = os.path.join(server.folder, "data")
    init = server.run(
        "initdb",
        "-D",
        data,
        "-U",
        USER,
        f"--pwfile={server.folder}/pwfile",
        "-A",
        "scram-sha-256",
        "-E",
        "UTF8",
        "--no-sync",
    )
    if init.returncode != 0:
        raise RuntimeError(f"initdb failed: {(init.stderr or init.stdout).strip().splitlines()[-1:]}")
    _start(server)


def _start(server: PostgresServer) -> None:
    data = os.path.join(server.folder, "data")
    options = f"-p {server.port} -k {server.folder} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    start = server.run(
        "pg_ctl",
        "-D",
        data,
        "-l",
        os.path.join(server.folder, "server.log"),
        "-w",
        "-t",
        str(START_TIMEOUT_S),
        "-o",
        options,
        "start",
    )
    if start.returncode != 0:
        raise RuntimeError(f"pg_ctl start failed: {server.log_tail(5)}")


def _create_database(server: PostgresServer, name: str = DB) -> None:
    import psycopg2

    conn = psycopg2.connect(host="127.0.0.1", port=server.port, user=USER, password=PASSWORD, dbname="postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
    finally:
        conn.close()
