"""Every table example of README.md and docs/ runs as written after the demo (issue 56): the fenced blocks
marked `<!-- runs-after-demo -->` are read from the documents (so the docs and this test cannot drift) and
run in the folder where the demo ran (`python -m compaction_assets.demo` at its smallest, once for the
module; its store is `var/store` there): `bash` blocks with this checkout's `compaction` on the PATH,
`python` blocks with the product's python, or with DuckDB's own (`<!-- runs-after-demo: .venv-duckdb -->`,
scripts/setup-duckdb-iceberg.sh), its Iceberg extension installed from its packages (offline)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# The documents whose table examples must all be marked, and what makes a block a table example.
TABLE_DOCUMENTS = (ROOT / "README.md", ROOT / "docs" / "table.md")
TABLE_WORDS = ("compaction table", "load_catalog", "iceberg_scan", "_tables/catalog.db", "spark.sql.catalog")
MARKED = re.compile(r"<!-- runs-after-demo(?:: (?P<runner>\S+))? -->\n```(?P<language>\w+)\n(?P<code>.*?)\n```", re.S)
FENCED = re.compile(r"^```\w*\n(.*?)\n```", re.S | re.M)
DUCKDB_RUNNER = ".venv-duckdb"
# Prints the platform DuckDB's extensions are built for and the extension files the packages ship.
EXTENSION_FILES = """
import duckdb, glob, json, os, duckdb_extension_avro, duckdb_extension_iceberg
packages = (duckdb_extension_avro, duckdb_extension_iceberg)
files = [f for m in packages for f in glob.glob(os.path.join(os.path.dirname(m.__file__), "extensions", "*", "*"))]
print(json.dumps({"platform": duckdb.execute("PRAGMA platform").fetchone()[0], "files": files}))
"""


@dataclass(frozen=True)
class Example:
    """One marked block: where it is, its language, which python runs it (None: the product's), its code."""

    document: str
    line: int
    language: str
    runner: str | None
    code: str

    @property
    def name(self) -> str:
        return f"{self.document}:{self.line}"


def examples() -> list[Example]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for match in MARKED.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            document = str(path.relative_to(ROOT))
            found.append(Example(document, line, match["language"], match["runner"], match["code"]))
    return found


EXAMPLES = examples()


def test_every_table_example_is_marked_and_the_walk_through_is_one():
    marked = {e.code for e in EXAMPLES}
    for path in TABLE_DOCUMENTS:
        for block in FENCED.findall(path.read_text(encoding="utf-8")):
            if any(word in block for word in TABLE_WORDS):
                assert block in marked, f"{path.relative_to(ROOT)}: a table example not marked runs-after-demo: {block}"
    assert {e.document for e in EXAMPLES} >= {"README.md", "docs/table.md"}
    assert any("compaction table show" in e.code and "compaction table scan" in e.code for e in EXAMPLES)
    assert all(e.language in ("bash", "python") and e.runner in (None, DUCKDB_RUNNER) for e in EXAMPLES)


def _clean_env() -> dict[str, str]:
    """This checkout's code and its `compaction` first on the PATH; no setting of the caller's store."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACTION_", "SPARK_", "DAGSTER_"))}
    return {**env, "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"}


@pytest.fixture(scope="module")
def demo_folder(tmp_path_factory) -> Path:
    """A folder where the demo ran at its smallest (its store: var/store)."""
    folder = tmp_path_factory.mktemp("after-demo")
    done = subprocess.run(
        [sys.executable, "-m", "compaction_assets.demo", "--events", "200"],
        cwd=folder,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1])["checks_failed"] == 0
    return folder


def _duckdb_home(python: Path, home: Path) -> Path:
    """A HOME whose DuckDB extension folder holds the extensions .venv-duckdb's packages ship, as `INSTALL`
    would have put them there: the examples' `INSTALL iceberg; LOAD iceberg` then download nothing."""
    done = subprocess.run([str(python), "-c", EXTENSION_FILES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["files"], "the DuckDB extension packages of .venv-duckdb hold no extension"
    for file in map(Path, found["files"]):
        target = home / ".duckdb" / "extensions" / file.parent.name / found["platform"] / file.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.exists():
            target.symlink_to(file)
    return home


def _command(example: Example, request) -> tuple[list[str], dict[str, str]]:
    env = _clean_env()
    if example.language == "bash":
        return ["bash", "-e", "-o", "pipefail", "-c", example.code], env
    if example.runner == DUCKDB_RUNNER:
        python = request.getfixturevalue("duckdb_python")
        home = _duckdb_home(python, request.getfixturevalue("tmp_path_factory").mktemp("duckdb-home"))
        return [str(python), "-c", example.code], {**env, "HOME": str(home)}
    return [sys.executable, "-c", example.code], env


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_the_example_runs_as_written_after_the_demo(example, demo_folder, request):
    argv, env = _command(example, request)
    done = subprocess.run(argv, cwd=demo_folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{example.name} failed:\n{done.stderr[-3000:]}"
    assert done.stdout.strip(), f"{example.name} printed nothing"
    if "compaction table show" in example.code:
        # the walk-through: the log's lag shows after the append without the table, and not after the commit
        assert '"lag_records": 1' in done.stdout and '"lag_records": 0' in done.stdout, done.stdout[-3000:]
    if "email" in example.code:
        # the demo's users-cdc rows: their emails, read back from the table
        assert "@example.com" in done.stdout, done.stdout[-3000:]
