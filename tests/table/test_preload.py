"""A command that will commit its table imports the table library beside its own work (table/catalog.py
`preload`); one that opts out, or runs with tables off, does not import it at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import sys, json
from compaction_assets.cli.command_line import parse, COMPACTION
import compaction_assets.cli  # the commands declare themselves
parse(COMPACTION, sys.argv[1:])
import threading
for t in threading.enumerate():
    if t.name == "tables-preload":
        t.join()
print(json.dumps("pyiceberg.table" in sys.modules))
"""


def _imports_the_library(args: list[str], **env: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_committing_command_preloads_the_table_library(tmp_path):
    assert _imports_the_library(["--store", str(tmp_path), "append", "t-0", "x.jsonl"])
    assert not _imports_the_library(["--store", str(tmp_path), "append", "--no-table", "t-0", "x.jsonl"])
    assert not _imports_the_library(["--store", str(tmp_path), "append", "t-0", "x.jsonl"], COMPACTION_TABLES="0")
