"""The public conformance cases (copied into tests/conformance/cases from the shared suite, so a clone
alone runs them) through the product's runner, in process, compared by the suite's own checker."""

from __future__ import annotations

import glob
import importlib.util
import json
import os

import pytest

from compaction_assets.conformance import CaseRun
from compaction_assets.store.log_store import LogStore
from compaction_assets.store.names import parse_log_name
from compaction_assets.topics.config import build_config
from compaction_assets.topics.config_store import ConfigStore

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = sorted(glob.glob(os.path.join(HERE, "cases", "*.json")))


def _checker():
    spec = importlib.util.spec_from_file_location("conformance_check", os.path.join(HERE, "check.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cases_are_in_the_repository():
    assert len(CASES) >= 17, CASES


@pytest.mark.parametrize("path", CASES, ids=[os.path.basename(p)[:-5] for p in CASES])
def test_case(spark, tmp_path, path):
    with open(path, encoding="utf-8") as fh:
        case = json.load(fh)
    result = CaseRun(case, spark, str(tmp_path / "store")).run()
    diffs = _checker().compare(case.get("expect") or {}, result)
    assert diffs == [], "\n".join(map(str, diffs))
    if result["error"] is None:  # the case's configuration is the one its store runs with
        store = LogStore(str(tmp_path / "store"))
        topics = {parse_log_name(log)[0] for log in store.logs()}
        expected = build_config(case.get("config") or {}).to_kafka()
        assert topics and all(ConfigStore(store.storage).effective(t) == expected for t in topics)


def test_the_checkers_default_runner_works_from_a_bare_python(tmp_path):
    """The suite's checker runs `<its python> -m compaction_assets.conformance`: from a Python without the
    project's dependencies (a fresh venv, nothing installed), in the checkout, the runner moves itself to
    the project's environment and the case passes."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(HERE))
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True, timeout=120)
    bare = str(tmp_path / "bare" / "bin" / "python")
    probe = subprocess.run(
        [bare, "-c", "import importlib.util as u; print(bool(u.find_spec('pyarrow')))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.stdout.strip() == "False", "the bare Python has the dependencies: nothing to show"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "SPARK_REMOTE")}
    run = subprocess.run(
        [
            sys.executable,
            os.path.join(HERE, "check.py"),
            "--runner",
            f"{bare} -m compaction_assets.conformance",
            CASES[0],
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0 and "1 passed, 0 failed" in run.stdout, run.stdout + run.stderr
