"""The public conformance cases (copied into tests/conformance/cases from the shared suite, so a clone
alone runs them) through the product's runner, in process, compared by the suite's own checker."""

from __future__ import annotations

import glob
import importlib.util
import json
import os

import pytest

from compaction_assets.conformance import CaseRun

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
    if result["error"] is None:   # the case's configuration is the one stored with its store
        stored = glob.glob(str(tmp_path / "store" / "_topics" / "*" / "v1.json"))
        assert len(stored) == 1, stored
