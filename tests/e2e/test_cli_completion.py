"""Shell completion of the command line (docs/cli.md, "Shell completion"), as a shell asks for it: the
program run with click's completion variables set, in a process of its own, the way the script that
`_COMPACTION_COMPLETE=bash_source compaction` prints runs it at each <TAB>. Commands, sub-commands and
options complete, and so do the log names of the store the command line names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compaction_assets import cli

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(sys.executable).parent / "compaction"


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """`argv` from this checkout, importing this checkout's package (PYTHONPATH comes before the editable
    install's finder, which may point at another checkout sharing the environment)."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        argv, cwd=str(REPO), env={**os.environ, "PYTHONPATH": path, **env}, capture_output=True, text=True, timeout=300
    )


def complete(line: str, env: dict[str, str] | None = None) -> list[str]:
    """What bash is offered at the end of `line` (a command line as typed, from `compaction`), as the bash
    script click prints asks the program: the words so far and the index of the one being completed."""
    words = line.split(" ")
    proc = _run(
        [sys.executable, "-m", "compaction_assets"],
        {"_COMPACTION_COMPLETE": "bash_complete", "COMP_WORDS": line, "COMP_CWORD": str(len(words) - 1), **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr == "", proc.stderr[-2000:]
    return [value for kind, _, value in (row.partition(",") for row in proc.stdout.splitlines()) if kind == "plain"]


def test_the_console_script_prints_its_bash_completion_script():
    assert SCRIPT.exists(), f"{SCRIPT} is missing: the project is not installed in this environment"
    proc = _run([str(SCRIPT)], {"_COMPACTION_COMPLETE": "bash_source"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "_COMPACTION_COMPLETE=bash_complete" in proc.stdout and "complete -o nosort -F" in proc.stdout
    assert proc.stdout.rstrip().endswith("_compaction_completion_setup;"), proc.stdout[-500:]


def test_command_names_complete():
    commands = complete("compaction ")
    assert commands[:3] == ["logs", "metrics", "describe"], commands  # in the order --help lists them
    assert {"clean", "set-log-start", "config", "table"} <= set(commands)
    assert complete("compaction set-") == ["set-log-start", "set-checkpoint"]


def test_sub_commands_and_their_options_complete():
    assert complete("compaction config ") == ["show", "set", "apply"]
    options = complete("compaction table scan --")
    assert {"--partition", "--snapshot-id", "--limit", "--store", "--now", "--help"} <= set(options), options
    assert complete("compaction config apply --d") == ["--dry-run"]


@pytest.fixture()
def store(tmp_path, capsys) -> str:
    """A store with the logs t-0 and t-1 and u-0, each of one record."""
    store = str(tmp_path / "store")
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"key": "a", "value": "1", "timestamp": 1}) + "\n")
    for log in ("t-0", "t-1", "u-0"):
        assert cli.main(["--store", store, "append", log, str(data)]) == 0, capsys.readouterr().err
    return store


def test_log_names_complete_from_the_store_the_command_line_names(store, tmp_path):
    assert complete(f"compaction --store {store} describe ") == ["t-0", "t-1", "u-0"]
    assert complete(f"compaction read --store {store} t") == ["t-0", "t-1"]
    assert complete("compaction clean u", env={"COMPACTION_STORE": store}) == ["u-0"]
    # a malformed variable that a command would refuse does not stop a completion
    assert complete("compaction roll u", env={"COMPACTION_STORE": store, "COMPACTION_LOCK_TTL_SECONDS": "x"}) == ["u-0"]
    # a store that is not there offers nothing, and says nothing on stderr (checked by `complete`)
    assert complete(f"compaction --store {tmp_path / 'nosuch'} describe ") == []
