"""Reports that tell the truth (issue 57): a fully cleaned log is not told to `roll` an empty active segment,
a forced cleaning says it was forced, an update commit reports the old rows it masked, and the README counts
the checks the demo prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

from compaction_assets.checks.specs import CHECK_SPECS
from tests.e2e.test_operator_safety import run, write_jsonl

REPO = Path(__file__).resolve().parents[2]
NOW = 10 * 24 * 3600 * 1000


def _store_with_a_sealed_segment(tmp_path, capsys) -> str:
    store = str(tmp_path / "store")
    data = write_jsonl(
        tmp_path / "in.jsonl", [{"key": f"k{i % 2}", "value": "v", "timestamp": 1000 + i} for i in range(5)]
    )
    assert run(capsys, "--store", store, "append", "t-0", str(data), "--no-table")[0] == 0
    assert run(capsys, "--store", store, "roll", "t-0", "--no-table")[0] == 0
    return store


def test_a_fully_cleaned_log_is_not_told_to_roll_an_empty_active_segment(tmp_path, capsys):
    store = _store_with_a_sealed_segment(tmp_path, capsys)
    assert run(capsys, "--store", store, "clean", "t-0", "--no-table", "--now", str(NOW))[0] == 0
    rc, out, err = run(capsys, "--store", store, "logs", "--now", str(NOW))
    assert rc == 0, err
    why = json.loads(out)[0]["why_not_eligible"]
    assert "roll" not in why, why
    assert why == (
        "every record is cleaned (offsets below 5) and the active segment is empty: nothing to clean until new "
        "records arrive"
    )


def test_a_forced_cleaning_says_it_was_forced(tmp_path, capsys):
    store = _store_with_a_sealed_segment(tmp_path, capsys)  # eligible anyway (dirty ratio 1.0)
    rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--force", "--no-table", "--now", str(NOW))
    assert rc == 0, err
    report = json.loads(out)[0]
    # SPEC §5: the reason is the evaluation's own when the log was eligible anyway; `forced` says --force was given
    assert (report["reason"], report["forced"]) == ("dirty_ratio", True)
    assert "t-0: cleaned (dirty_ratio, forced: eligible anyway)" in err, err
    rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--force", "--no-table", "--now", str(NOW))
    report = json.loads(out)[0]  # now clean: not eligible, cleaned because forced
    assert (report["reason"], report["forced"]) == ("forced", True)
    assert "t-0: cleaned (forced)" in err, err
    rc, out, err = run(capsys, "--store", store, "clean", "t-0", "--no-table", "--now", str(NOW))
    assert json.loads(out)[0]["forced"] is False


def test_an_update_commit_reports_the_old_rows_it_masked(tmp_path, capsys):
    store = str(tmp_path / "store")
    first = write_jsonl(
        tmp_path / "1.jsonl", [{"key": "a", "value": "1", "timestamp": 1}, {"key": "b", "value": "1", "timestamp": 1}]
    )
    assert run(capsys, "--store", store, "append", "users-0", str(first))[0] == 0
    update = write_jsonl(
        tmp_path / "2.jsonl", [{"key": "a", "value": "2", "timestamp": 2}, {"key": "b", "value": None, "timestamp": 2}]
    )
    rc, out, err = run(capsys, "--store", store, "append", "users-0", str(update))
    assert rc == 0, err
    table = json.loads(out)["table"]
    # a: updated (its old row masked, its new row added); b: deleted (its row masked, the key gone)
    assert (table["rows_added"], table["rows_deleted"], table["rows_masked"]) == (1, 1, 2), table
    assert "1 rows added, 1 deleted, 2 old rows masked" in err, err
    rc, out, err = run(capsys, "--store", store, "table", "commit", "users-0")
    assert rc == 0, err
    assert json.loads(out)[0]["rows_masked"] == 0  # already there


def test_the_readme_counts_the_checks_the_demo_prints():
    readme = " ".join((REPO / "README.md").read_text().split())  # its lines joined
    per_log = len(CHECK_SPECS) + 1  # the cleaning's checks and the table's (tables are on by default)
    said = re.search(r"`(\d+)/(\d+) checks passed`", readme)
    assert said is not None, "the README says what the demo prints per log"
    assert (int(said.group(1)), int(said.group(2))) == (per_log, per_log)
    words = {4: "four", 5: "five", 6: "six"}
    assert f"verified by its {words[per_log]} checks ({words[len(CHECK_SPECS)]} on the cleaning" in readme
