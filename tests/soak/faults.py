"""The fault injector: at random moments, SIGKILL one part of the deployment and bring it back as its
supervisor would (the servers on the same ports and data, the daemon as a fresh process). A run worker is
not restarted by anyone but Dagster: its code server reports the run failed."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from tests.soak.services import Deployment, kill_pid, pid_alive, run_workers, wait_until

KINDS = ("run_worker", "daemon", "connect", "s3", "postgres")
WEIGHTS = (4, 2, 1, 2, 2)  # run workers are what dies most in a fleet; each server still goes down often


@dataclass
class FaultTally:
    """Faults done, by kind, with when each happened (seconds from the start) and any restart's error."""

    by_kind: Counter = field(default_factory=Counter)
    times: list[tuple[float, str]] = field(default_factory=list)
    restart_s: dict[str, float] = field(default_factory=dict)  # the longest restart of each kind
    errors: list[str] = field(default_factory=list)
    daemon_exits: int = 0  # times the daemon exited by itself and was restarted

    def total(self) -> int:
        return sum(self.by_kind.values())


class Injector(threading.Thread):
    """Kills one part every `interval_s` on average (uniformly 0.3-1.7 times it) until `stop` is set."""

    def __init__(self, deployment: Deployment, seed: int, interval_s: float, started: float):
        super().__init__(name="soak-faults", daemon=True)
        self.d = deployment
        self.rng = random.Random(seed)
        self.interval_s = interval_s
        self.started = started
        self.tally = FaultTally()
        self.stop = threading.Event()

    def run(self) -> None:
        due = time.monotonic() + self.rng.uniform(0.3, 1.7) * self.interval_s
        while not self.stop.wait(1.0):
            self.keep_daemon_alive()
            if time.monotonic() < due:
                continue
            due = time.monotonic() + self.rng.uniform(0.3, 1.7) * self.interval_s
            kind = self.rng.choices(KINDS, WEIGHTS)[0]
            try:
                done = self.fault(kind)
            except Exception as exc:  # a restart that failed: the soak fails on it, after stopping
                self.tally.errors.append(f"{kind}: {exc}")
                return
            if done:
                self.tally.by_kind[kind] += 1
                self.tally.times.append((round(time.monotonic() - self.started, 1), kind))

    def fault(self, kind: str) -> bool:
        """Kill `kind` and restart it; False when there was nothing of that kind to kill (no run worker)."""
        t = time.monotonic()
        if kind == "run_worker":
            workers = run_workers(self.d.daemon.groups)
            if not workers:
                return False
            return kill_pid(self.rng.choice(workers))
        down = self.rng.uniform(0, 5)  # how long it stays down before its supervisor restarts it
        if kind == "daemon":
            self.d.daemon.kill()
            time.sleep(down)
            self.d.daemon.start()
        elif kind == "connect":
            pid = self.d.connect.server_pid()
            if pid is not None and kill_pid(pid):
                # gone before the restart: start-connect-server.sh refuses while its pid file's process lives
                wait_until("the killed Connect server's exit", lambda: not pid_alive(pid), 60, 0.2)
            time.sleep(down)
            self.d.connect.start()
        elif kind == "s3":
            self.d.s3.kill()
            time.sleep(down)
            self.d.s3.restart()
        else:
            self.d.pg.kill()
            time.sleep(down)
            self.d.pg.restart()
        self.tally.restart_s[kind] = round(max(self.tally.restart_s.get(kind, 0.0), time.monotonic() - t), 1)
        return True

    def keep_daemon_alive(self) -> None:
        """A daemon that exited on its own (its storage gone too long) is restarted, as its supervisor would;
        counted apart, not as a fault."""
        if not self.d.daemon.alive():
            self.d.daemon.start()
            self.tally.daemon_exits += 1
