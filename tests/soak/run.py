"""The soak from start to figures: the deployment started, files landing and faults injected for `minutes`,
then both stopped, the deployment left to settle (every fault's part back), the daemon stopped, and every
check run.

    python -m tests.soak [--minutes 10] [--seed 1] [--fault-interval 15] [--settle 900] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.soak.checks import Checked, check_all, settle
from tests.soak.faults import Injector
from tests.soak.producer import Producer
from tests.soak.services import Deployment, start_deployment, wait_until

# 20 logs of 3 topics
PARTITIONS = {"orders": 8, "users": 6, "items": 6}


@dataclass
class Figures:
    """What a soak did and found."""

    minutes: float  # of faults and landing files
    seed: int
    faults: dict[str, int]
    faults_total: int
    daemon_exits: int  # the daemon exiting on its own (restarted), beside the faults
    files_landed: int
    records_landed: int
    tombstones_landed: int
    put_retries: int  # the producer's PUTs tried again (the S3 server down)
    settle_s: float  # from the end of the faults until everything was in
    checked: Checked
    unsettled: list[str] = field(default_factory=list)
    fault_errors: list[str] = field(default_factory=list)
    total_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not (self.unsettled or self.fault_errors or self.checked.problems or self.checked.lost)

    def text(self) -> str:
        c = self.checked
        lines = [
            f"soak (seed {self.seed}): {self.minutes:.1f} minutes of faults and landing files, "
            f"{self.total_s / 60:.1f} minutes in all",
            f"faults: {self.faults_total} {dict(sorted(self.faults.items()))}; the daemon exited by itself "
            f"{self.daemon_exits} times",
            f"landed: {self.files_landed} files, {self.records_landed} records ({self.tombstones_landed} tombstones), "
            f"{self.put_retries} PUTs retried",
            f"settled in {self.settle_s:.0f} s; runs {dict(sorted(c.runs.items()))}",
            f"checked: {c.records_shown} records read back, {c.state_rows} latest-state rows, {c.table_rows} table "
            f"rows; lost {c.lost}, duplicated {c.duplicated}, wrong {c.wrong}, uncleanable {c.uncleanable}, "
            f"orphans after gc {c.orphans}",
        ]
        lines += [f"NOT SETTLED: {w}" for w in self.unsettled[:20]]
        lines += [f"FAULT ERROR: {e}" for e in self.fault_errors]
        lines += [f"PROBLEM: {p}" for p in c.problems[:30]]
        lines.append("PASSED" if self.passed else "FAILED")
        return "\n".join(lines)


def _first_ticks(d: Deployment, timeout: float) -> None:
    """The daemon is up and its code location loaded (its discovery sensor ticked once) before files land."""
    log = d.daemon.log
    wait_until("the daemon's first sensor tick", lambda: "log_discovery_sensor" in log.read_text(), timeout, 2.0)


def soak(work: Path, minutes: float, seed: int, fault_interval_s: float, settle_s: float) -> Figures:
    """One soak in `work`; the deployment stopped at the end whatever happened."""
    logs = [f"{t}-{p}" for t, n in PARTITIONS.items() for p in range(n)]
    d = start_deployment(work, PARTITIONS)
    saved = dict(os.environ)
    os.environ.update(d.env)  # the checks read the store and the instance as the daemon does
    started = time.monotonic()
    try:
        _first_ticks(d, 300)
        producer = Producer(d.env, d.landing_uri, PARTITIONS, seed)
        injector = Injector(d, seed + 1, fault_interval_s, time.monotonic())
        producer.start()
        injector.start()
        window = time.monotonic()
        time.sleep(minutes * 60)
        injector.stop.set()
        producer.stop.set()
        injector.join()
        producer.join()
        if producer.error is not None:
            raise producer.error
        ended = time.monotonic()
        home = d.env["DAGSTER_HOME"]
        unsettled = settle_wait(d, producer, logs, home, settle_s)
        settled = time.monotonic() - ended
        d.daemon.stop_all()  # nothing changes under the checks
        checked = check_all(producer.ledger, logs, home)
        tally = injector.tally
        return Figures(
            minutes=(ended - window) / 60,
            seed=seed,
            faults=dict(tally.by_kind),
            faults_total=tally.total(),
            daemon_exits=tally.daemon_exits,
            files_landed=producer.ledger.files,
            records_landed=producer.ledger.count(),
            tombstones_landed=producer.ledger.tombstones,
            put_retries=producer.retries,
            settle_s=settled,
            checked=checked,
            unsettled=unsettled,
            fault_errors=tally.errors,
            total_s=time.monotonic() - started,
        )
    finally:
        d.stop()
        os.environ.clear()
        os.environ.update(saved)


def settle_wait(d: Deployment, producer: Producer, logs: list[str], home: str, timeout: float) -> list[str]:
    """The deployment left alone until it settles; the daemon restarted should it exit meanwhile."""
    from resources.log_store import LogStoreResource

    if not d.daemon.alive():
        d.daemon.start()
    return settle(LogStoreResource(), producer.ledger, logs, home, timeout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="of landing files and faults")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fault-interval", type=float, default=15.0, help="mean seconds between faults")
    ap.add_argument("--settle", type=float, default=900.0, help="seconds the deployment may take to settle")
    ap.add_argument("--keep", help="work in this folder and keep it (default: a temporary one, removed)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    work = Path(args.keep or tempfile.mkdtemp(prefix="soak-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        figures = soak(work, args.minutes, args.seed, args.fault_interval, args.settle)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(figures.text())
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(figures), indent=2, default=str))
    return 0 if figures.passed else 1


if __name__ == "__main__":
    sys.exit(main())
