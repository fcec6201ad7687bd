"""An operator's month (issue 57), "a bad file stops only its own log, and can be set aside": `ingest` goes on
past a log with a bad file and says which failed; a landing file is set aside with its reason and put back;
the landing backlog (`landing status`, `ingest --dry-run`); and a connector's layout ingested as the native
one is named."""

from __future__ import annotations

import json
import os
from pathlib import Path

from compaction_assets.store.log_store import LogStore
from tests.e2e.test_operator_safety import errors, run, write_jsonl

NOW = 2_000_000_000_000


def _land(landing: Path, log: str, name: str, records: list[dict], mtime_ms: int | None = None) -> Path:
    topic, part = log.rsplit("-", 1)
    folder = landing / topic / f"partition={part}"
    folder.mkdir(parents=True, exist_ok=True)
    path = write_jsonl(folder / name, records)
    if mtime_ms is not None:
        os.utime(path, (mtime_ms / 1000, mtime_ms / 1000))
    return path


def _bad(landing: Path, log: str, name: str = "b.jsonl", mtime_ms: int | None = None) -> Path:
    """A file whose first line is a JSON array: `expected a JSON object, got list`."""
    topic, part = log.rsplit("-", 1)
    folder = landing / topic / f"partition={part}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps([{"key": "k", "value": "v", "timestamp": 1}]) + "\n")
    if mtime_ms is not None:
        os.utime(path, (mtime_ms / 1000, mtime_ms / 1000))
    return path


def _recs(n: int, start: int = 0) -> list[dict]:
    return [{"key": f"k{i}", "value": str(i), "timestamp": 1000 + i} for i in range(start, start + n)]


def _ends(store: str, log: str) -> int:
    handle = LogStore(store).log(log)
    return handle.manifest().log_end_offset if handle.exists() else -1


def test_ingest_goes_on_past_a_bad_log_and_names_it(tmp_path, capsys):
    store, landing = str(tmp_path / "store"), tmp_path / "landing"
    _land(landing, "bad-0", "a.jsonl", _recs(2))
    _bad(landing, "bad-0")
    _land(landing, "bad-0", "c.jsonl", _recs(1, 5))
    _land(landing, "good-0", "a.jsonl", _recs(3))
    rc, out, err = run(capsys, "--store", store, "ingest", "--landing", str(landing))
    assert rc == 1, err
    summary = json.loads(out)
    assert summary["good-0"]["files_ingested"] == 1 and summary["good-0"]["table"]["committed"] is True
    assert _ends(store, "good-0") == 3, "the healthy log is ingested"
    failed = summary["bad-0"]
    assert "expected a JSON object, got list" in failed["error"] and "b.jsonl" in failed["error"]
    assert failed["files"] == ["a.jsonl"], "the files before the bad one stay ingested, and say so"
    assert failed["table"]["committed"] is True, "what was ingested of the failed log reaches its table"
    assert _ends(store, "bad-0") == 2
    lines = errors(err)
    assert any(line.startswith("error: bad-0: ") and "b.jsonl" in line for line in lines), err
    assert lines[-1] == "error: 1 of 2 log(s) failed to ingest: bad-0", err


def test_a_log_named_without_a_landing_folder_is_refused_before_any_ingestion(tmp_path, capsys):
    store, landing = str(tmp_path / "store"), tmp_path / "landing"
    _land(landing, "good-0", "a.jsonl", _recs(3))
    rc, out, err = run(capsys, "--store", store, "ingest", "--landing", str(landing), "good-0", "typo-0")
    assert rc == 1 and out == ""
    assert errors(err) == [f"error: no landing folder for log 'typo-0' under {landing}"]
    assert _ends(store, "good-0") == -1, "nothing ingested when a named log is a typo"


def test_a_bad_file_is_set_aside_with_its_reason_and_put_back(tmp_path, capsys):
    store, landing = str(tmp_path / "store"), tmp_path / "landing"
    _land(landing, "t-0", "a.jsonl", _recs(2))
    bad = _bad(landing, "t-0")
    _land(landing, "t-0", "c.jsonl", _recs(1, 5))
    assert run(capsys, "--store", store, "ingest", "--landing", str(landing))[0] == 1
    base = ["--store", store, "landing"]
    rc, out, err = run(
        capsys, *base, "quarantine", "t-0", "b.jsonl", "--reason", "JSON array: TICKET-7", "--landing", str(landing)
    )
    assert rc == 0, err
    done = json.loads(out)
    assert done["log"] == "t-0" and done["file"] == "b.jsonl" and done["reason"] == "JSON array: TICKET-7"
    assert bad.exists(), "the landing area is left as it is: the file is set aside in the store"
    rc, out, err = run(capsys, "--store", store, "ingest", "--landing", str(landing))
    assert rc == 0, err
    report = json.loads(out)["t-0"]
    assert report["files"] == ["c.jsonl"] and report["files_set_aside"] == ["b.jsonl"]
    rc, out, err = run(capsys, *base, "status", "--landing", str(landing), "--now", str(NOW))
    assert rc == 0, err
    [row] = json.loads(out)
    assert row["log"] == "t-0" and row["pending_files"] == 0
    [aside] = row["set_aside"]
    assert aside["file"] == "b.jsonl" and aside["reason"] == "JSON array: TICKET-7" and aside["by"]
    # refusals, one line each
    again = run(capsys, *base, "quarantine", "t-0", "b.jsonl", "--reason", "x", "--landing", str(landing))
    assert again[0] == 1 and errors(again[2]) == ["error: t-0: b.jsonl is already set aside (JSON array: TICKET-7)"]
    ingested = run(capsys, *base, "quarantine", "t-0", "a.jsonl", "--reason", "x", "--landing", str(landing))
    assert ingested[0] == 1 and "a.jsonl is already ingested" in ingested[2]
    missing = run(capsys, *base, "quarantine", "t-0", "nope.jsonl", "--reason", "x", "--landing", str(landing))
    assert missing[0] == 1 and errors(missing[2]) == [
        f"error: t-0: no landing file 'nope.jsonl' under {landing} (pending: none)"
    ]
    no_reason = run(capsys, *base, "quarantine", "t-0", "b.jsonl", "--landing", str(landing))
    assert no_reason[0] == 2 and "--reason" in no_reason[2]
    # put back: pending again, and fails again until fixed
    rc, out, err = run(capsys, *base, "release", "t-0", "b.jsonl")
    assert rc == 0, err
    assert json.loads(out)["released"]["reason"] == "JSON array: TICKET-7"
    assert run(capsys, *base, "release", "t-0", "b.jsonl")[2].strip() == "error: t-0: b.jsonl is not set aside"
    assert run(capsys, "--store", store, "ingest", "--landing", str(landing))[0] == 1
    bad.write_text(json.dumps({"key": "k9", "value": "9", "timestamp": 9}) + "\n")  # fixed
    rc, out, err = run(capsys, "--store", store, "ingest", "--landing", str(landing))
    assert rc == 0 and json.loads(out)["t-0"]["files"] == ["b.jsonl"], err


def test_the_landing_backlog_in_landing_status_and_ingest_dry_run(tmp_path, capsys):
    store, landing = str(tmp_path / "store"), tmp_path / "landing"
    first = _land(landing, "t-0", "a.jsonl", _recs(2), mtime_ms=NOW - 60_000)
    assert run(capsys, "--store", store, "ingest", "--landing", str(landing))[0] == 0
    older = _land(landing, "t-0", "b.jsonl", _recs(2, 2), mtime_ms=NOW - 30_000)
    newer = _land(landing, "t-0", "c.jsonl", _recs(2, 4), mtime_ms=NOW - 10_000)
    _land(landing, "u-0", "a.jsonl", _recs(1), mtime_ms=NOW - 5_000)
    assert first.exists()
    rc, out, err = run(capsys, "--store", store, "landing", "status", "--landing", str(landing), "--now", str(NOW))
    assert rc == 0, err
    rows = {row["log"]: row for row in json.loads(out)}
    assert rows["t-0"]["pending_files"] == 2
    assert rows["t-0"]["pending_bytes"] == older.stat().st_size + newer.stat().st_size
    assert rows["t-0"]["oldest_pending_age_ms"] == 30_000 and rows["t-0"]["files_ingested"] == 1
    assert rows["u-0"]["pending_files"] == 1 and rows["u-0"]["oldest_pending_age_ms"] == 5_000
    rc, out, err = run(
        capsys, "--store", store, "landing", "status", "t-0", "--files", "--landing", str(landing), "--now", str(NOW)
    )
    assert rc == 0 and [row["log"] for row in json.loads(out)] == ["t-0"], err
    assert json.loads(out)[0]["pending"] == ["b.jsonl", "c.jsonl"]
    # a dry run ingests nothing, commits nothing, and says what would be ingested
    before = _ends(store, "t-0")
    rc, out, err = run(capsys, "--store", store, "ingest", "--dry-run", "--landing", str(landing), "--now", str(NOW))
    assert rc == 0, err
    would = json.loads(out)
    assert would["t-0"]["pending"] == ["b.jsonl", "c.jsonl"] and would["u-0"]["pending"] == ["a.jsonl"]
    assert would["t-0"]["oldest_pending_age_ms"] == 30_000
    assert _ends(store, "t-0") == before and _ends(store, "u-0") == -1
    # nothing to do: an empty dry run on a store that does not exist creates no store
    empty = tmp_path / "empty"
    (empty / "t" / "partition=0").mkdir(parents=True)
    rc, out, _ = run(capsys, "--store", str(tmp_path / "none"), "ingest", "--dry-run", "--landing", str(empty))
    assert rc == 0 and json.loads(out)["t-0"]["pending_files"] == 0
    assert not (tmp_path / "none").exists()


def test_a_connector_layout_ingested_as_native_names_the_landing_format(tmp_path, capsys):
    store, landing = str(tmp_path / "store"), tmp_path / "landing"
    landing.mkdir()
    # Aiven's S3 sink: `<topic>-<partition>-<start offset>.json` at the root, a JSON array of records
    (landing / "users-0-0.json").write_text(json.dumps([{"key": "u1", "value": "x", "offset": 0, "timestamp": 5}]))
    rc, _, err = run(capsys, "--store", store, "ingest", "--landing", str(landing))
    assert rc == 1
    [line, *_] = [e for e in errors(err) if e.startswith("error: users-0")]
    assert "expected a JSON object, got list" in line
    assert "looks like the aiven connector's layout" in line and "landing.format=aiven" in line, line
