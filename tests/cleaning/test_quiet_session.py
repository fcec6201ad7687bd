"""A local session starts quietly: the JVM's start-up lines are dropped, its other output passes through."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from compaction_assets.spark import STARTUP_NOISE

CHILD = """
import time
from compaction_assets.spark import get_spark
spark = get_spark()
spark.range(2).collect()
spark.sparkContext._jvm.System.err.println("a line the JVM prints later")
time.sleep(1)  # the filter thread forwards it
print("done")
"""


@pytest.mark.slow
def test_a_local_session_starts_without_start_up_noise():
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_MASTER")}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done" in proc.stdout
    assert "a line the JVM prints later" in proc.stderr
    for noise in STARTUP_NOISE:
        assert noise not in proc.stderr
