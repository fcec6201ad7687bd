"""An operator's week with no surprises (issue 28, items 2-10): every command says what it did, refuses
careless input in one line before it changes anything, and reads what writers commonly produce."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore
from tests.e2e.test_operator_safety import REPO, errors, run, write_jsonl

DAY_MS = 24 * 3600 * 1000


@pytest.fixture
def store(tmp_path, capsys):
    """A store with log t-0 holding five records (offsets 0..4), all in its active segment."""
    store = str(tmp_path / "store")
    data = write_jsonl(
        tmp_path / "in.jsonl", [{"key": f"k{i % 2}", "value": "v", "timestamp": 1000 + i} for i in range(5)]
    )
    rc, _, err = run(capsys, "--store", store, "append", "t-0", str(data))
    assert rc == 0, err
    return store


def _records(store: str, log: str) -> list[tuple]:
    return [(r.offset, r.key, r.value) for r in iter_records(LogStore(store).log(log))]


# --- 2. ingest from a landing area that does not exist ----------------------------------------------


def test_ingest_from_a_missing_landing_area_fails_in_one_line(tmp_path, capsys):
    missing = tmp_path / "nonexistent"
    rc, out, err = run(capsys, "--store", str(tmp_path / "store"), "ingest", "--landing", str(missing))
    assert rc == 1 and out == "", out
    assert errors(err) == [err.strip()] and str(missing) in err and "does not exist" in err


# --- 3. append of several files: all or nothing, and a summary --------------------------------------


def test_append_of_several_files_is_all_or_nothing_and_summarised(store, tmp_path, capsys):
    good = write_jsonl(tmp_path / "good.jsonl", [{"key": "g", "value": "1", "timestamp": 5}])
    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [{"key": "b", "value": "1", "timestamp": 5}, {"key": None, "value": "2", "timestamp": 6}],
    )
    before = _records(store, "t-0")
    rc, out, err = run(capsys, "--store", store, "append", "t-0", str(good), str(bad))
    assert rc == 1 and out == ""
    assert errors(err) == [err.strip()] and f"{bad}: line 2" in err and "nothing appended" in err
    assert _records(store, "t-0") == before, "the first file must not be appended alone"
    bad.write_text(json.dumps({"key": "b", "value": "1", "timestamp": 5}) + "\n")  # fixed: run again
    rc, out, err = run(capsys, "--store", store, "append", "t-0", str(good), str(bad))
    assert rc == 0, err
    summary = json.loads(out)
    assert summary["appended"] == 2 and summary["log_end_offset"] == 7
    assert [(f["file"], f["records"]) for f in summary["files"]] == [(str(good), 1), (str(bad), 1)]
    assert [k for _, k, _ in _records(store, "t-0")][-2:] == [b"g", b"b"], "each file once"


def test_append_help_says_avro_is_accepted(capsys):
    from compaction_assets import cli

    assert cli.main(["append", "--help"]) == 0
    assert "Avro" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command, flag",
    [
        ("plan", "--force"),
        ("read", "--from"),
        ("read", "--limit"),
        ("gc", "--grace-seconds"),
        ("ingest", "--drop-invalid"),
    ],
)
def test_every_flag_has_a_help_text(command, flag):
    from compaction_assets.cli import COMPACTION

    option = next(p for p in COMPACTION.commands[command].params if flag in p.opts)
    assert getattr(option, "help", None), f"{command} {flag} has no help text"


# --- 4. reserved names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("append", "_defaults-0", "IN"),
        ("config", "set", "_defaults", "segment.ms=1000"),
        ("config", "show", "_defaults"),
    ],
)
def test_a_topic_named_like_the_config_stores_defaults_is_refused(store, tmp_path, capsys, args):
    data = write_jsonl(tmp_path / "one.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
    args = tuple(str(data) if a == "IN" else a for a in args)
    rc, out, err = run(capsys, "--store", store, *args)
    assert rc == 1 and out == "" and errors(err) == [err.strip()] and "reserved" in err, err
    assert not (Path(store) / "_defaults-0").exists()
    assert not (Path(store) / "_topics" / "_defaults").exists()


# --- 5. config apply and set ------------------------------------------------------------------------


def _config_show(store, capsys):
    rc, out, err = run(capsys, "--store", store, "config", "show")
    assert rc == 0, err
    return json.loads(out)


def test_config_apply_without_defaults_keeps_the_stored_defaults_and_says_so(store, tmp_path, capsys):
    with_defaults = tmp_path / "a.yaml"
    with_defaults.write_text("defaults:\n  segment.ms: 60000\ntopics: {}\n")
    assert run(capsys, "--store", store, "config", "apply", str(with_defaults))[0] == 0
    without = tmp_path / "b.yaml"
    without.write_text("topics:\n  other: {min.cleanable.dirty.ratio: 0.1}\n")
    rc, out, err = run(capsys, "--store", store, "config", "apply", str(without))
    assert rc == 0, err
    report = json.loads(out)
    assert "kept" in report["defaults"] and "segment.ms" not in json.dumps(report["changes"])
    assert _config_show(store, capsys)[0]["defaults"]["settings"]["segment.ms"] == 60000


def test_config_apply_dry_run_of_a_strategy_change_shows_the_diff(spark, store, tmp_path, capsys):
    rc, _, err = run(capsys, "--store", store, "clean", "t-0", "--force", "--now", str(10 * DAY_MS))
    assert rc == 0, err
    change = tmp_path / "strategy.yaml"
    change.write_text("topics:\n  t:\n    compaction.strategy: timestamp\n")
    rc, out, err = run(capsys, "--store", store, "config", "apply", str(change), "--dry-run")
    assert rc == 0, err
    report = json.loads(out)
    assert report["applied"] is False
    diff = {c["topic"]: c for c in report["changes"]}["t"]
    assert diff["changed"]["compaction.strategy"] == ["offset", "timestamp"] and diff["needs_confirm"]
    rc, out, err = run(capsys, "--store", store, "config", "apply", str(change))
    assert rc == 1 and "--confirm" in err and out == ""


def test_a_config_set_that_changes_nothing_stores_no_version(store, capsys):
    assert run(capsys, "--store", store, "config", "set", "t", "segment.ms=60000")[0] == 0
    rc, out, err = run(capsys, "--store", store, "config", "set", "t", "segment.ms=60000")
    assert rc == 0, err
    assert json.loads(out) == {"topic": "t", "version": 1, "changed": {}, "stored": False}
    assert len(os.listdir(Path(store) / "_topics" / "t")) == 1


# --- 6. a topics file is an input, stored when it changes; it never stops a command (issue 57) ---------


@pytest.mark.parametrize("args", [("read", "t-0"), ("logs",), ("roll", "t-0"), ("metrics",)])
def test_a_topics_file_is_stored_when_it_changes_and_never_stops_a_command(store, tmp_path, capsys, args):
    assert run(capsys, "--store", store, "config", "set", "t", "segment.ms=60000")[0] == 0
    topics = tmp_path / "topics.yaml"
    topics.write_text("topics:\n  t: {segment.ms: 120000}\n")
    rc, out, err = run(capsys, "--store", store, "--topics", str(topics), *args)
    assert rc == 0 and out and errors(err) == [], err
    assert f"topics file {str(topics)!r} applied to the store" in err and "segment.ms" in err
    assert _config_show(store, capsys)[1]["config"]["segment.ms"] == 120000
    # the operator changes it by hand: the same file does not undo it, nor stop the command
    assert run(capsys, "--store", store, "config", "set", "t", "segment.ms=30000")[0] == 0
    rc, out, err = run(capsys, "--store", store, "--topics", str(topics), *args)
    assert rc == 0 and out and "topics file" not in err, err
    shown = _config_show(store, capsys)
    assert shown[1]["config"]["segment.ms"] == 30000 and shown[1]["config_version"] == 3
    assert [a["path"] for a in shown[0]["applied_files"]] == [str(topics)]


def test_a_topics_file_that_cannot_be_applied_is_said_and_the_stored_configuration_runs(
    spark, store, tmp_path, capsys, monkeypatch
):
    assert run(capsys, "--store", store, "clean", "t-0", "--force", "--now", str(10 * DAY_MS))[0] == 0
    topics = tmp_path / "topics.yaml"
    topics.write_text("topics:\n  t: {compaction.strategy: timestamp}\n")
    monkeypatch.setenv("COMPACTION_TOPICS", str(topics))  # as a deployment names it
    rc, out, err = run(capsys, "--store", store, "describe", "t-0")
    assert rc == 0 and json.loads(out)["config"]["compaction.strategy"] == "offset", err
    assert "not applied" in err and "--confirm" in err and "the stored configuration runs" in err
    # a `config set` works with COMPACTION_TOPICS set, and is what runs
    assert run(capsys, "--store", store, "config", "set", "t", "min.cleanable.dirty.ratio=0.9")[0] == 0
    rc, out, _ = run(capsys, "--store", store, "describe", "t-0")
    assert json.loads(out)["config"]["min.cleanable.dirty.ratio"] == 0.9


def test_a_config_set_equal_to_the_default_stores_nothing(store, capsys):
    rc, out, err = run(capsys, "--store", store, "config", "set", "t", "min.cleanable.dirty.ratio=0.5")
    assert rc == 0, err
    assert json.loads(out) == {"topic": "t", "version": 0, "changed": {}, "stored": False}
    assert "nothing changes" in err and not (Path(store) / "_topics" / "t").exists()


def test_config_apply_shows_a_default_before_value_as_the_default(store, tmp_path, capsys):
    cdc = tmp_path / "cdc.yaml"
    cdc.write_text("topics:\n  t: {landing.format: confluent, table.freshness.ms: 5000}\n")
    rc, out, err = run(capsys, "--store", store, "config", "apply", str(cdc))
    assert rc == 0, err
    (change,) = json.loads(out)["changes"]
    assert change["changed"] == {"landing.format": ["native", "confluent"], "table.freshness.ms": [60000, 5000]}


# --- 7. why a log is not eligible ---------------------------------------------------------------------


def test_not_eligible_says_why(store, tmp_path, capsys):
    rc, out, _ = run(capsys, "--store", store, "logs", "--now", "2000")
    row = json.loads(out)[0]
    assert row["eligible"] is False and "active segment" in row["why_not_eligible"]
    assert "roll" in row["why_not_eligible"] and "segment.ms (7 days)" in row["why_not_eligible"]
    assert run(capsys, "--store", store, "roll", "t-0")[0] == 0
    assert (
        run(
            capsys, "--store", store, "config", "set", "t", "min.cleanable.dirty.ratio=0.99", "min.compaction.lag.ms=0"
        )[0]
        == 0
    )
    data = write_jsonl(tmp_path / "more.jsonl", [{"key": "k9", "value": "v", "timestamp": 3000}])
    rc, out, _ = run(capsys, "--store", store, "plan", "--metadata-only", "--now", "4000")
    ev = json.loads(out)[0]
    assert ev["eligible"] is True  # all of it is dirty, never cleaned
    rc, _, err = run(capsys, "--store", store, "append", "t-0", str(data))
    assert rc == 0, err
    assert run(capsys, "--store", store, "config", "set", "t", "min.compaction.lag.ms=3600000")[0] == 0
    rc, out, _ = run(capsys, "--store", store, "plan", "--metadata-only", "--now", "4000")
    ev = json.loads(out)[0]
    assert not ev["eligible"] and "min.compaction.lag.ms (1 hour)" in ev["why_not_eligible"], ev


def test_dirty_ratio_below_the_minimum_gives_the_figures(spark, store, tmp_path, capsys):
    assert run(capsys, "--store", store, "roll", "t-0")[0] == 0
    assert run(capsys, "--store", store, "clean", "t-0", "--now", str(10 * DAY_MS))[0] == 0
    data = write_jsonl(tmp_path / "more.jsonl", [{"key": "k0", "value": "w", "timestamp": 3000}])
    assert run(capsys, "--store", store, "append", "t-0", str(data))[0] == 0
    assert run(capsys, "--store", store, "roll", "t-0")[0] == 0
    assert run(capsys, "--store", store, "config", "set", "t", "min.cleanable.dirty.ratio=0.9")[0] == 0
    _rc, out, _ = run(capsys, "--store", store, "logs", "--now", str(10 * DAY_MS))
    why = json.loads(out)[0]["why_not_eligible"]
    assert "min.cleanable.dirty.ratio 0.9" in why and "bytes" in why, why


def test_logs_does_not_list_an_uncleanable_log_as_eligible(store, capsys):
    from compaction_assets.cleaning import engine

    assert run(capsys, "--store", store, "roll", "t-0")[0] == 0
    engine.mark_uncleanable(LogStore(store).log("t-0"), RuntimeError("a bad page"))
    _rc, out, _ = run(capsys, "--store", store, "logs", "--now", str(10 * DAY_MS))
    row = json.loads(out)[0]
    assert row["uncleanable"] and row["eligible"] is False
    assert "clear-uncleanable" in row["why_not_eligible"]


# --- 8. set-log-start beyond the log end --------------------------------------------------------------


@pytest.mark.parametrize("confirm", [(), ("--confirm",)])
def test_set_log_start_beyond_the_log_end_refuses_before_saying_what_it_deletes(store, capsys, confirm):
    rc, out, err = run(capsys, "--store", store, "set-log-start", "t-0", "100", *confirm)
    assert rc == 1 and out == "" and errors(err) == [err.strip()] and err.count("\n") == 1, err
    assert "beyond the log end offset 5" in err and "deletes" not in err


# --- 9. pipes, errors and arguments ---------------------------------------------------------------------


def test_read_into_head_exits_quietly(tmp_path, capsys):
    store = str(tmp_path / "store")
    data = write_jsonl(
        tmp_path / "many.jsonl", [{"key": f"k{i}", "value": "v" * 100, "timestamp": i} for i in range(20000)]
    )
    assert run(capsys, "--store", store, "append", "t-0", str(data))[0] == 0
    proc = subprocess.run(
        f"'{sys.executable}' -m compaction_assets --store '{store}' read t-0 | head -1; echo \"rc=${{PIPESTATUS[0]}}\"",
        shell=True,
        executable="/bin/bash",
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert json.loads(proc.stdout.splitlines()[0])["offset"] == 0
    assert proc.stdout.splitlines()[-1] in ("rc=0", "rc=141")
    assert proc.stderr == "", proc.stderr


def test_clean_of_a_missing_log_prints_only_the_error(store, capsys):
    rc, out, err = run(capsys, "--store", store, "clean", "nosuch-0")
    assert rc == 1 and out == "" and "nosuch-0" in err


def test_read_of_a_corrupt_segment_names_the_file(store, capsys):
    m = LogStore(store).log("t-0").manifest()
    path = LogStore(store).log("t-0").path(m.segments[0].files[0].name)
    Path(path).write_bytes(b"PAR1 this is not a parquet file PAR1")
    rc, _out, err = run(capsys, "--store", store, "read", "t-0")
    assert rc == 1 and errors(err) == [err.strip()] and path in err and "unexpected" not in err, err


def test_malformed_jsonl_names_the_true_column(tmp_path, capsys):
    src = REPO / "tests" / "corpus" / "bad-malformed-json.jsonl"
    rc, _, err = run(capsys, "--store", str(tmp_path / "store"), "append", "t-0", str(src))
    last = src.read_text().splitlines()[2]
    assert rc == 1 and "line 3" in err and f"column {len(last) + 1}" in err, err


@pytest.mark.parametrize("flag", ["--from", "--limit"])
def test_negative_read_arguments_are_refused_in_one_line(store, capsys, flag):
    rc, out, err = run(capsys, "--store", store, "read", "t-0", flag, "-1")
    assert rc == 1 and out == "" and errors(err) == [err.strip()] and flag in err, err


# --- 10. Parquet timestamps -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typ",
    [
        pa.timestamp("ms"),
        pa.timestamp("us"),
        pa.timestamp("ns"),
        pa.timestamp("s"),
        pa.timestamp("ms", tz="UTC"),
        pa.timestamp("us", tz="Europe/Berlin"),
    ],
)
def test_parquet_timestamp_columns_are_read_as_epoch_milliseconds(tmp_path, capsys, typ):
    ms = [1_767_225_600_000, 1_767_225_601_000]
    col = pa.array(ms, pa.timestamp("ms", tz=typ.tz)).cast(typ)
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"key": ["a", "b"], "value": ["1", "2"], "timestamp": col}), path)
    store = str(tmp_path / "store")
    rc, _, err = run(capsys, "--store", store, "append", "t-0", str(path))
    assert rc == 0, err
    assert [r.timestamp for r in iter_records(LogStore(store).log("t-0"))] == ms
