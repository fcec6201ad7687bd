"""The README's "Your first hour" session, run exactly as written (the commands are read from the README)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _block_after(marker: str) -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    match = re.search(re.escape(marker) + r"\n```[a-z]*\n(.*?)\n```", text, re.S)
    assert match, f"README.md has no code block after {marker!r}"
    return match.group(1)


def test_the_first_hour_session_runs_as_written(tmp_path):
    commands = _block_after("<!-- first-hour: commands -->")
    expected = _block_after("<!-- first-hour: output -->").splitlines()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTION_", "SPARK_"))}
    env["TMPDIR"] = str(tmp_path)  # the session's `mktemp -d` folder lands under the test's tmp_path
    proc = subprocess.run(
        ["bash", "-e", "-c", commands], cwd=str(REPO), env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[-len(expected) :] == expected, proc.stdout[-2000:]
    # the steps said what the README says they say
    first_plan, second_plan = proc.stdout.index('"eligible": false'), proc.stdout.index('"eligible": true')
    assert first_plan < second_plan  # not eligible before the roll, eligible after it
    assert "cleaned (dirty_ratio) 4 -> 2 records" in proc.stderr
    store = next(tmp_path.glob("*/store"))
    assert (store / "_topics" / "profiles" / "v1.json").exists()
