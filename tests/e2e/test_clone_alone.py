"""The tests pass from a clone with nothing beside it; under CI the shared conformance suite is required.

The guard runs in CI (the default suite): `scripts/test.sh` in a clone, as CI runs it, with the clone's
setup, lint and one test file; about 15-20 s of CPU (docs/testing.md). The clone runs the same pinned
environment (`.venv` linked) with the caches of the checkout's lint copied, and without the JVM archive
(COMPACTION_JVM_QUICK_START=0: its key is the clone's own class path, so setup would build one)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository's files (tracked and new, not ignored) in a folder with no `../shared` beside it."""
    target = tmp_path_factory.mktemp("alone") / "repo"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=str(REPO), check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for name in files:
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    os.symlink(REPO / ".venv", target / ".venv")  # the same pinned environment; no second install
    if (REPO / ".venv-duckdb").exists():  # DuckDB's environment (scripts/setup-duckdb-iceberg.sh): no install
        os.symlink(REPO / ".venv-duckdb", target / ".venv-duckdb")
    for cache in (".mypy_cache", ".ruff_cache"):  # lint's caches: mypy from a cold start costs a minute
        if (REPO / cache).is_dir():
            shutil.copytree(REPO / cache, target / cache, symlinks=True)
    assert not (target.parent / "shared").exists()
    return target


def _test_sh(clone: Path, *args: str, ci: bool) -> subprocess.CompletedProcess:
    # the default run of test.sh, whatever this run's own (CI's real-system suite sets TEST_REAL)
    dropped = ("CI", "PYTEST_ADDOPTS", "TEST_REAL", "TEST_ALL", "KILL_TRIALS")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env["COMPACTION_JVM_QUICK_START"] = "0"
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        ["bash", "scripts/test.sh", "-q", "-p", "no:cacheprovider", *args],
        cwd=str(clone),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
def test_a_clone_alone_runs_the_repositorys_conformance_cases(clone):
    proc = _test_sh(clone, "tests/conformance/test_cases.py", "-k", "01-basic or in_the_repository", ci=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "2 passed" in proc.stdout and "only the repository's cases" in proc.stderr


def test_under_ci_a_missing_shared_suite_is_a_failure(clone):
    proc = _test_sh(clone, "tests/test_layers.py", ci=True)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout  # its tests ran and passed: the guard after them failed the run
    assert "CI=true but ../shared/conformance is missing" in proc.stderr
