"""A backfill ingested on a real Spark standalone cluster (`compaction ingest --spark` with SPARK_MASTER set, as
an operator runs it) stores what the same ingestion in this process stores, record for record, and a rerun
ingests nothing twice.

The cluster's worker runs without this worktree on its Python path: its tasks import the product from the
package the driver sends with the job (ingest/spark_units.py), not from an installed copy. The master and
worker are started for the module and stopped by their ids (tests/cluster_helpers.py). Slow: the driver is
a subprocess that starts its own Spark application.
"""

from __future__ import annotations

import json
import os

import pytest

from compaction_assets.ingest.route import SPARK
from compaction_assets.store.log_store import LogStore
from tests import cluster_helpers as ch
from tests.log.test_spark_ingest import FILES, _ingest, _stored, aiven_jsonl, native_jsonl

pytestmark = [
    pytest.mark.slow,
    pytest.mark.ci_real,
    pytest.mark.skipif(ch.java_skip(), reason=str(ch.java_missing_reason())),
]

LAYOUTS = {"native-jsonl": (native_jsonl, {}), "aiven-jsonl": (aiven_jsonl, {"landing.format": "aiven"})}


@pytest.fixture(scope="module")
def cluster(request, tmp_path_factory):
    c = ch.StandaloneCluster(tmp_path_factory.mktemp("ingest-cluster"), cores=2, memory="1g")
    # the worker's Python path without the worktree: its tasks find the product only in what the driver sends
    c.env["PYTHONPATH"] = os.pathsep.join(p for p in c.env["PYTHONPATH"].split(os.pathsep) if p != str(ch.ROOT))
    request.addfinalizer(c.stop)
    return c.start()


def _cli_ingest(tmp_path, cluster, landing, topics, store) -> dict:
    env = ch.driver_env(tmp_path, master=cluster.url)
    args = ["-m", "compaction_assets", "--store", str(store), "--topics", str(topics)]
    proc = ch.run_driver([*args, "ingest", "--landing", str(landing), "--spark", "--no-table"], env)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_backfill_on_the_cluster_stores_what_this_process_stores(tmp_path, cluster, layout):
    write, cfg = LAYOUTS[layout]
    landing = tmp_path / "landing"
    log = write(landing)
    topics = tmp_path / "topics.yaml"
    topics.write_text(json.dumps({"topics": {"users": cfg}}) + "\n")  # JSON is YAML
    _, reference = _ingest(tmp_path, "here", landing, log, cfg, None)
    printed = _cli_ingest(tmp_path, cluster, landing, topics, tmp_path / "store")[log]
    assert printed["path"] == SPARK and printed["files_ingested"] == FILES, printed
    assert _stored(LogStore(str(tmp_path / "store")), log) == reference
    apps = cluster.master_state()
    assert apps.get("activeapps", []) + apps.get("completedapps", []), "the driver ran no application on the cluster"
    again = _cli_ingest(tmp_path, cluster, landing, topics, tmp_path / "store")[log]
    assert again["files_ingested"] == 0 and _stored(LogStore(str(tmp_path / "store")), log) == reference
