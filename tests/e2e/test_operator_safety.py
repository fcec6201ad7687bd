"""Operator safety (issue 20): the configuration stored with the store, tools that never destroy what they
did not make, one-line errors, and `read` output that `append` takes back."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from compaction_assets import cli
from compaction_assets.cli import command, command_group
from compaction_assets.cli.context import Context
from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore

REPO = Path(__file__).resolve().parents[2]
VERSIONED = "user-profiles-versioned-0"


def run(capsys, *args: str) -> tuple[int, str, str]:
    """The real CLI in this process (reusing the test session's Spark): (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def errors(err: str) -> list[str]:
    """stderr without progress lines ("[12:34:56] ...")."""
    return [line for line in err.splitlines() if line and not line.startswith("[")]


def subprocess_cli(*args: str, env: dict | None = None, cwd: Path = REPO, timeout: float = 300):
    """The CLI in a process of its own (`timeout` only guards against a hang; no test bounds its time)."""
    return subprocess.run(
        [sys.executable, "-m", "compaction_assets", *args],
        cwd=str(cwd),
        text=True,
        capture_output=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
    )


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


# --- 1. configuration stored with the store ------------------------------------------------------


def test_configuration_lives_with_the_store_and_a_clean_from_another_directory_uses_it(
    spark, tmp_path, capsys, monkeypatch
):
    store = str(tmp_path / "store")
    monkeypatch.delenv("COMPACTION_TOPICS", raising=False)
    monkeypatch.chdir(REPO)  # where topics.yaml is
    rc, out, err = run(capsys, "--store", store, "config", "apply", "topics.yaml")
    assert rc == 0, err
    changes = {c["topic"]: c["changed"] for c in json.loads(out)["changes"]}
    assert changes[VERSIONED[:-2]]["compaction.strategy"] == ["offset", "header"]
    data = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"key": "k", "value": "v2", "timestamp": 10, "headers": [["version", 2]]},
            {"key": "k", "value": "v1", "timestamp": 20, "headers": [["version", 1]]},
        ],
    )
    assert run(capsys, "append", VERSIONED, str(data), "--store", store)[0] == 0  # option after the command

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no topics.yaml here
    rc, out, err = run(capsys, "--store", store, "describe", VERSIONED)
    assert rc == 0, err
    desc = json.loads(out)
    assert desc["config"]["compaction.strategy"] == "header" and desc["config_source"] == "topic"
    assert desc["config_version"] == 1 and "config apply" in desc["config_changed_by"]
    rc, out, err = run(capsys, "--store", store, "clean", VERSIONED, "--force")
    assert rc == 0, err
    values = [r.value for r in iter_records(LogStore(store).log(VERSIONED))]
    assert values == [b"v2"]  # the highest version wins, from any directory

    # a topics file whose change a real apply would refuse (a strategy change on a cleaned log) is not
    # applied, and the command runs with the stored configuration (issue 57: a file never stops work)
    offset_file = tmp_path / "offset.yaml"
    offset_file.write_text("topics:\n  user-profiles-versioned: {compaction.strategy: offset}\n")
    rc, out, err = run(capsys, "--store", store, "--topics", str(offset_file), "describe", VERSIONED)
    assert rc == 0 and json.loads(out)["config"]["compaction.strategy"] == "header", err
    assert "not applied" in err and "compaction.strategy" in err and errors(err) == []
    # a strategy change on a cleaned log says what it means and needs --confirm
    rc, _, err = run(capsys, "--store", store, "config", "set", VERSIONED[:-2], "compaction.strategy=offset")
    assert rc == 1 and "--confirm" in err and VERSIONED in err and len(errors(err)) == 1
    assert LogStore(store).storage.list_dir(f"{store}/_topics/user-profiles-versioned") == ["v1.json"]
    rc, out, err = run(
        capsys, "--store", store, "config", "set", VERSIONED[:-2], "compaction.strategy=offset", "--confirm"
    )
    assert rc == 0 and json.loads(out)["version"] == 2, err
    rc, out, _ = run(capsys, "--store", store, "config", "show", VERSIONED[:-2], "--history")
    history = json.loads(out)[0]["history"]
    assert [h["version"] for h in history] == [1, 2]
    assert history[1]["source"].startswith("config set") and history[1]["changed_ms"] > 0


def test_topics_file_given_for_a_topic_the_store_does_not_know_is_stored_once(tmp_path, capsys):
    store = str(tmp_path / "store")
    topics = tmp_path / "t.yaml"
    topics.write_text("topics:\n  orders: {min.cleanable.dirty.ratio: 0.1}\n")
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
    assert run(capsys, "--store", store, "--topics", str(topics), "append", "orders-0", str(data))[0] == 0
    _rc, out, _ = run(capsys, "--store", store, "config", "show", "orders")
    shown = json.loads(out)[0]
    assert shown["config"]["min.cleanable.dirty.ratio"] == 0.1 and shown["config_version"] == 1
    assert f"topics file {topics}" in shown["config_changed_by"]
    assert run(capsys, "--store", store, "--topics", str(topics), "logs")[0] == 0
    assert LogStore(store).storage.list_dir(f"{store}/_topics/orders") == ["v1.json"]  # stored once
    # without the file, every later command uses the stored configuration
    _rc, out, _ = run(capsys, "--store", store, "describe", "orders-0")
    assert json.loads(out)["config"]["min.cleanable.dirty.ratio"] == 0.1


def test_config_apply_dry_run_reports_the_diff_and_stores_nothing(tmp_path, capsys):
    store = str(tmp_path / "store")
    topics = tmp_path / "t.yaml"
    topics.write_text("defaults: {delete.retention.ms: 5}\ntopics:\n  a: {segment.bytes: 100}\n")
    rc, out, err = run(capsys, "--store", store, "config", "apply", str(topics), "--dry-run")
    assert rc == 0, err
    assert json.loads(out)["changes"] == [
        {"topic": "a", "changed": {"delete.retention.ms": [86400000, 5], "segment.bytes": [1073741824, 100]}}
    ]
    assert not (tmp_path / "store" / "_topics").exists()


def test_invalid_topics_file_fails_the_code_location_load_in_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics:\n  orders: {min.cleanable.dirty.ratio: 2}\n")
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COMPACTION_TOPICS": str(bad), "DAGSTER_HOME": str(tmp_path)},
    )
    assert proc.returncode != 0
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "CompactionError:" in ln]
    assert len(lines) == 1, proc.stdout + proc.stderr
    assert str(bad) in lines[0] and "'orders'" in lines[0] and "min.cleanable.dirty.ratio" in lines[0]
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COMPACTION_MAX_RUNS_PER_TICK": "abc", "DAGSTER_HOME": str(tmp_path)},
    )
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "CompactionError:" in ln]
    assert proc.returncode != 0 and len(lines) == 1 and "COMPACTION_MAX_RUNS_PER_TICK='abc'" in lines[0]


# --- 2. nothing destroys what it did not create ----------------------------------------------------


def test_demo_refuses_a_store_holding_logs_it_did_not_make(tmp_path, capsys):
    store = tmp_path / "store"
    data = write_jsonl(tmp_path / "mine.jsonl", [{"key": "mine", "value": "precious", "timestamp": 1}])
    assert run(capsys, "--store", str(store), "append", "user-profiles-0", str(data))[0] == 0
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    env = {
        "COMPACTION_STORE": str(store),
        "COMPACTION_LANDING": str(tmp_path / "landing"),
        "COMPACTION_LATEST_STATE": str(tmp_path / "latest"),
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    (tmp_path / "home").mkdir()
    proc = subprocess.run(
        ["bash", "scripts/demo.sh"],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **env},
    )
    assert proc.returncode == 2, proc.stderr
    assert "holds logs the demo did not make (user-profiles-0)" in proc.stderr
    assert [r.value for r in iter_records(LogStore(str(store)).log("user-profiles-0"))] == [b"precious"]
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert [p for p in after if p not in before and not str(p).startswith("home")] == []


def test_demo_refuses_landing_files_it_did_not_write(tmp_path):
    from compaction_assets.demo import DemoRefused, prepare_folders

    theirs = tmp_path / "landing" / "user-profiles" / "partition=0" / "theirs.jsonl"
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"key": "a", "value": "b", "timestamp": 1}\n')
    with pytest.raises(DemoRefused, match="theirs.jsonl"):
        prepare_folders(str(tmp_path / "store"), str(tmp_path / "landing"), str(tmp_path / "latest"))
    assert theirs.exists() and not (tmp_path / "store").exists()


def test_latest_state_output_leaves_a_users_folder_alone(spark, tmp_path, capsys):
    store = str(tmp_path / "store")
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
    assert run(capsys, "--store", store, "append", "t-0", str(data))[0] == 0
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "thesis.txt").write_text("years of work")
    rc, _, err = run(capsys, "--store", store, "latest-state", "t-0", "--output", str(folder))
    assert rc == 1 and "not empty" in err and "--overwrite" in err and "starting Spark" not in err
    assert (folder / "thesis.txt").read_text() == "years of work"
    fresh = tmp_path / "fresh"
    assert run(capsys, "--store", store, "latest-state", "t-0", "--output", str(fresh))[0] == 0
    rc, _, err = run(capsys, "--store", store, "latest-state", "t-0", "--output", str(fresh))
    assert rc == 0, err  # its own earlier output is replaced
    assert spark.read.parquet(str(fresh)).count() == 1
    rc, _, err = run(capsys, "--store", store, "latest-state", "t-0", "--output", str(folder), "--overwrite")
    assert rc == 0 and not (folder / "thesis.txt").exists(), err


def test_refused_append_to_a_new_log_leaves_no_folder(tmp_path, capsys):
    store = tmp_path / "store"
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"key": None, "value": "x", "timestamp": 1}])
    rc, _, err = run(capsys, "--store", str(store), "append", "fresh-0", str(bad))
    assert rc == 1 and len(errors(err)) == 1
    assert not (store / "fresh-0").exists()


def test_set_log_start_says_what_it_deletes_and_needs_confirm(tmp_path, capsys):
    store = str(tmp_path / "store")
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": f"k{i}", "value": "v", "timestamp": i} for i in range(5)])
    assert run(capsys, "--store", store, "append", "t-0", str(data))[0] == 0
    rc, _, err = run(capsys, "--store", store, "set-log-start", "t-0", "3")
    assert rc == 1 and "deletes offsets 0..2" in err and "--confirm" in err and len(errors(err)) == 1
    assert LogStore(store).log("t-0").manifest().log_start_offset == 0
    rc, out, err = run(capsys, "--store", store, "set-log-start", "t-0", "3", "--confirm")
    assert rc == 0 and json.loads(out)["log_start_offset"] == 3, err


# --- 3. one line per error -----------------------------------------------------------------------


@pytest.fixture
def small_store(tmp_path, capsys):
    store = str(tmp_path / "store")
    data = write_jsonl(tmp_path / "in.jsonl", [{"key": "a", "value": "1", "timestamp": 1}])
    assert run(capsys, "--store", store, "append", "t-0", str(data))[0] == 0
    return store


def test_unreachable_spark_connect_fails_naming_the_endpoint(small_store):
    proc = subprocess_cli("--store", small_store, "plan", "t-0", env={"SPARK_REMOTE": "sc://127.0.0.1:1"})
    errs = errors(proc.stderr)
    assert proc.returncode == cli.EXIT_TRANSIENT and len(errs) == 1, proc.stderr  # an engine fault (issue 28)
    assert "127.0.0.1:1" in errs[0] and "SPARK_REMOTE" in errs[0] and "unreachable" in errs[0]


def test_bad_spark_master_names_the_setting_without_a_java_trace(small_store):
    proc = subprocess_cli("--store", small_store, "plan", "t-0", env={"SPARK_MASTER": "bogus"})
    errs = errors(proc.stderr)
    assert proc.returncode == cli.EXIT_TRANSIENT and len(errs) == 1, proc.stderr  # a session that cannot start
    assert "SPARK_MASTER='bogus'" in errs[0] and "Java" not in proc.stderr


def test_yaml_syntax_error_is_one_line(small_store, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("topics:\n  orders: {a: [\n")
    rc, _, err = run(capsys, "--store", small_store, "--topics", str(bad), "logs")
    assert rc == 1 and errors(err) == [err.strip()] and str(bad) in err and "line 3" in err


def test_a_store_that_does_not_exist_is_said(tmp_path, capsys):
    rc, out, err = run(capsys, "logs", "--store", str(tmp_path / "nonexistent"))
    assert rc == 1 and out == "" and "does not exist" in err and len(errors(err)) == 1


def test_unknown_log_is_refused_before_spark_starts(small_store, capsys):
    rc, _, err = run(capsys, "--store", small_store, "latest-state", "nosuch-0")
    assert rc == 1 and "no log 'nosuch-0'" in err and "starting Spark" not in err


def test_global_options_before_or_after_the_command(small_store, capsys):
    for args in (("--store", small_store, "logs"), ("logs", "--store", small_store)):
        rc, out, err = run(capsys, *args)
        assert rc == 0 and [r["log"] for r in json.loads(out)] == ["t-0"], err
    # a sub-command's: before the group, after it, after the sub-command; the nearest to the command wins
    shown = [
        run(capsys, *args)
        for args in (
            ("--store", small_store, "config", "show", "t"),
            ("config", "--store", small_store, "show", "t"),
            ("config", "show", "t", "--store", small_store),
            ("--store", "nosuch", "config", "--store", "nosuch", "show", "t", "--store", small_store),
        )
    ]
    assert [rc for rc, _, _ in shown] == [0, 0, 0, 0], shown
    assert len({out for _, out, _ in shown}) == 1 and json.loads(shown[0][1])[0]["topic"] == "t"


def test_bad_variable_is_one_line_and_the_trace_needs_compaction_debug(small_store, monkeypatch, capsys):
    monkeypatch.setenv("COMPACTION_LOCK_TTL_SECONDS", "abc")
    rc, _, err = run(capsys, "--store", small_store, "logs")
    assert rc == 1 and errors(err) == [err.strip()] and "COMPACTION_LOCK_TTL_SECONDS" in err
    monkeypatch.setenv("COMPACTION_LOCK_TTL_SECONDS", "300")

    def broken_group() -> click.Group:
        """A command line like the CLI's, whose `logs` command fails unexpectedly."""
        group = command_group("compaction", "broken")

        @command(group, "logs", help="fails")
        def cmd_logs(ctx: Context) -> int:
            return int(1 / 0)

        return group

    capsys.readouterr()
    rc = cli.main(["--store", small_store, "logs"], group=broken_group())
    err = capsys.readouterr().err
    assert rc == 1 and errors(err) == [err.strip()] and "ZeroDivisionError" in err and "COMPACTION_DEBUG" in err
    monkeypatch.setenv("COMPACTION_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        cli.main(["--store", small_store, "logs"], group=broken_group())


# --- 4. read | append round-trips ----------------------------------------------------------------


def test_read_output_appends_back_to_the_same_records(tmp_path, capsys):
    store = str(tmp_path / "store")
    records = [
        {
            "key_b64": base64.b64encode(b"\xff\x00key").decode(),
            "value_b64": base64.b64encode(b"\x80\x81").decode(),
            "timestamp": 5,
            "headers": [
                ["bin", {"b64": base64.b64encode(b"\xfe\xff").decode()}],
                ["n", 7],
                ["none", None],
                ["text", "é"],
            ],
        },
        {"key": "plain", "value": "text", "timestamp": 6, "headers": []},
        {"key": "plain", "value": None, "timestamp": 7},
        {"key_b64": base64.b64encode(b"\xc3").decode(), "value": "v", "timestamp": 8, "offset": 10},
    ]
    assert run(capsys, "--store", store, "append", "src-0", str(write_jsonl(tmp_path / "in.jsonl", records)))[0] == 0
    rc, out, _ = run(capsys, "--store", store, "read", "src-0")
    assert rc == 0 and "delete_horizon" not in out
    dump = tmp_path / "dump.jsonl"
    dump.write_text(out)
    rc, _, err = run(capsys, "--store", store, "append", "copy-0", str(dump))
    assert rc == 0, err
    st = LogStore(store)

    def records_of(log):
        return [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(st.log(log))]

    assert records_of("copy-0") == records_of("src-0")
    assert records_of("src-0")[0][1:3] == (b"\xff\x00key", b"\x80\x81")


def test_dagster_operator_job_applies_a_topics_file_and_reports_the_diff(tmp_path):
    import dagster as dg

    from compaction_assets.defs.config_job import apply_topics_config_job
    from compaction_assets.topics.config_store import ConfigStore
    from resources.log_store import LogStoreResource

    topics = tmp_path / "t.yaml"
    topics.write_text("topics:\n  orders: {compaction.strategy: timestamp}\n")
    resource = LogStoreResource(
        root=str(tmp_path / "store"),
        landing=str(tmp_path / "landing"),
        latest_state_root=str(tmp_path / "latest"),
        topics_file=str(topics),
    )
    with dg.instance_for_test() as instance:
        result = apply_topics_config_job.execute_in_process(
            instance=instance,
            resources={"log_store": resource},
            run_config={"ops": {"apply_topics_config": {"config": {"topics_file": str(topics)}}}},
        )
        assert result.success
        meta = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"][0]
        changes = meta.event_specific_data.metadata["changes"].value
        assert changes == {"orders": {"compaction.strategy": ["offset", "timestamp"]}}
        stored = ConfigStore(resource.store.storage).current("orders")
        assert stored.version == 1 and stored.source.startswith(f"dagster run {result.run_id}")
        assert resource.config_for("orders-0").strategy == "timestamp"


def test_refused_first_ingestion_leaves_no_log_folder(tmp_path, capsys):
    store = tmp_path / "store"
    folder = tmp_path / "landing" / "fresh" / "partition=0"
    folder.mkdir(parents=True)
    write_jsonl(folder / "a.jsonl", [{"key": None, "value": "x", "timestamp": 1}])
    rc, _, err = run(capsys, "--store", str(store), "ingest", "--landing", str(tmp_path / "landing"))
    assert rc == 1 and len(errors(err)) == 1, err
    assert not (store / "fresh-0").exists()


@pytest.mark.slow
def test_demo_runs_twice_replacing_only_what_it_made(tmp_path):
    env = {
        **os.environ,
        "COMPACTION_STORE": str(tmp_path / "store"),
        "COMPACTION_LANDING": str(tmp_path / "landing"),
        "COMPACTION_LATEST_STATE": str(tmp_path / "latest"),
        "DAGSTER_HOME": str(tmp_path / "home"),
    }
    (tmp_path / "home").mkdir()
    other = tmp_path / "landing" / "someone-else" / "partition=0" / "keep.jsonl"  # not a demo topic
    other.parent.mkdir(parents=True)
    other.write_text('{"key": "a", "value": "b", "timestamp": 1}\n')
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-m", "compaction_assets.demo", "--events", "200"],
            cwd=str(REPO),
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.splitlines()[-1])["checks_failed"] == 0
        # the Debezium topic in Confluent's layout: the row deleted in the source is gone, the others at their
        # latest change by LSN although some changes landed out of order
        assert (
            "users-cdc-0: row id=7, deleted in the source (Debezium op=d, then its tombstone), is gone from "
            "the latest state; 39 of 40 rows remain, each at its latest change by source.lsn"
        ) in proc.stderr
    assert other.read_text().startswith('{"key": "a"')
    assert sorted(LogStore(str(tmp_path / "store")).logs()) == [
        "user-profiles-0",
        "user-profiles-1",
        "user-profiles-2",
        "user-profiles-versioned-0",
        "users-cdc-0",
    ]
