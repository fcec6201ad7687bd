"""The soak (tests/soak/) at CI's size: the daemon with its sensors over 20 logs of 3 topics, the store, the
landing area and the tables on the S3 server, the instance on PostgreSQL, one Spark Connect server, an Aiven
S3 sink's files landing throughout (tombstones included) while run workers, the daemon, the Connect server,
the S3 server and PostgreSQL are SIGKILLed and restarted. Then every landed record must be in its log once,
every latest state the ledger's dedup, every table its latest state; no log marked, no run in flight, no
object left after garbage collection. `python -m tests.soak --minutes 30` is the long version.

SOAK_MINUTES (2) and SOAK_SEED (1) set its size and draw."""

from __future__ import annotations

import os

import pytest

from tests.conftest import real_server_unavailable

MINUTES = float(os.environ.get("SOAK_MINUTES", "2"))
SEED = int(os.environ.get("SOAK_SEED", "1"))
FAULT_INTERVAL_S = 12.0  # about a dozen faults in CI's minutes, every kind likely among them
SETTLE_S = 600.0  # a loaded machine's last runs, each part back from its fault (1-2 minutes when quiet)


@pytest.mark.slow
@pytest.mark.ci_real
def test_the_deployment_under_faults_loses_nothing(tmp_path):
    from tests.soak.run import soak

    try:
        figures = soak(tmp_path, MINUTES, SEED, FAULT_INTERVAL_S, SETTLE_S)
    except (RuntimeError, OSError) as exc:  # a server that cannot start here (a missing binary)
        if "cannot" in str(exc) or "missing" in str(exc):
            real_server_unavailable("a server of the soak", exc)
        raise
    print("\n" + figures.text())
    assert figures.passed, figures.text()
    assert figures.faults_total >= 5, figures.text()
    assert figures.checked.lost == 0 and figures.records_landed > 0, figures.text()
