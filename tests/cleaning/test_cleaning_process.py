"""A cleaning decided and written in its own process (the CLI's case) imports no pandas: pyarrow imports
it on the first conversion that asks it anything (`pa.array`, `pa.scalar`, `to_numpy`, a group-by), 0.3 s
of a cleaning after a few new records, and the cleaning needs nothing from it (segments/arrays.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore
from tests.cleaning.test_small_and_large_paths import DAY, NOW, _build

CLEAN_IN_ITS_OWN_PROCESS = """
import json, sys
from compaction_assets.cleaning import engine
from compaction_assets.spark.lazy_session import settings_session
from compaction_assets.topics.config import build_config
from compaction_assets.store.log_store import LogStore
from compaction_assets.spark import get_spark
root, config, now = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
report = engine.run(LogStore(root, gc_grace_s=0).log("paths-0"), build_config(config), now,
                    spark=settings_session(get_spark), force=True)
print(json.dumps({"decision": report.route.decision, "written": report.stats.records_written,
                  "pandas": "pandas" in sys.modules}))
"""
CONFIG = {"segment.bytes": 1500, "compaction.strategy": "offset", "delete.retention.ms": DAY}


def test_cleanings_in_their_own_process_import_no_pandas(tmp_path, make_config):
    """A first cleaning (the range decided here) and one after a few new records (the prefix probed)."""
    log, cfg = _build(LogStore(str(tmp_path), gc_grace_s=0), make_config, "offset")
    assert cfg == make_config(**{k.replace(".", "_"): v for k, v in CONFIG.items()})  # what _build wrote with
    first = _clean_in_its_own_process(tmp_path, NOW)
    assert first == {"decision": "local", "written": 60, "pandas": False}, first
    writer.append(
        log,
        cfg,
        [
            {"key": f"k{k:03d}", "value": None if k == 9 else f"new-{k}", "timestamp": 5000 + k}
            for k in (1, 9, 20, 20, 41)
        ],
    )
    writer.roll(log)
    before = len(list(iter_records(log)))
    second = _clean_in_its_own_process(tmp_path, NOW + 1)
    # the prefix probed, the newer records' winners found here, and records really removed
    assert second["decision"] == "probed" and second["written"] > 0 and len(list(iter_records(log))) < before, second
    assert second["pandas"] is False, second


def _clean_in_its_own_process(root, now: int) -> dict:
    """What CLEAN_IN_ITS_OWN_PROCESS printed: the route, the records written, whether pandas was imported."""
    done = subprocess.run(
        [sys.executable, "-c", CLEAN_IN_ITS_OWN_PROCESS, str(root), json.dumps(CONFIG), str(now)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
