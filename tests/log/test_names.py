"""SPEC §1: topic and partition names that Kafka does not allow are refused wherever they come from
(the topics file, a landing folder, the command line, a Dagster partition key), and nothing is read or
written outside the store and landing roots.

Every test plants a readable log and landing data *outside* the roots (at the place a `../` name would
reach), snapshots the whole temporary tree outside the roots, and checks that the snapshot is unchanged
and that the planted data never shows up in an output.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import dagster as dg
import pytest
from dagster_pyspark import LazyPySparkResource

from compaction_assets import cli
from compaction_assets.definitions import defs
from compaction_assets.defs.assets import cleanable_range, compacted_log, latest_state, raw_segments
from compaction_assets.defs.automation.sensors import log_discovery_sensor
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from resources.log_store import LogStoreResource
from tests.defs.test_dagster import materialize

SECRET = "SECRET-OUTSIDE-THE-ROOTS"


def tree(root: Path, skip: set[Path]) -> dict:
    """Every entry under `root` (not following links, not entering `skip`): size, mtime, type."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in skip]
        for name in dirnames + filenames:
            st = (here / name).lstat()
            out[str((here / name).relative_to(root))] = (st.st_size, st.st_mtime_ns, stat.S_IFMT(st.st_mode))
    return out


class Roots:
    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.store = tmp / "store"
        self.landing = tmp / "landing"
        self.topics = tmp / "topics.yaml"
        self.topics.write_text("topics: {ok: {segment.bytes: 1000}}\n")
        # inside the roots: one good log and one good landing folder
        good = LogStore(str(self.store)).log("ok-0")
        writer.append(good, build_config({}), [{"key": "k", "value": "inside", "timestamp": 1}])
        self.land("ok", "partition=1", "inside")
        # outside the roots: a readable log where `<store>/../outside/evil-0` points, landing data
        evil = LogStore(str(tmp / "outside")).log("evil-0")
        writer.append(evil, build_config({}), [{"key": "k", "value": SECRET, "timestamp": 1}])
        (tmp / "outside" / "landing" / "partition=0").mkdir(parents=True)
        (tmp / "outside" / "landing" / "partition=0" / "a.jsonl").write_text(self.line(SECRET))
        self.before = self.snapshot()

    @staticmethod
    def line(value: str) -> str:
        return json.dumps({"key": "k", "value": value, "timestamp": 1}) + "\n"

    def land(self, topic_dir: str, part_dir: str, value: str = SECRET) -> Path:
        folder = self.landing / topic_dir / part_dir
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "a.jsonl").write_text(self.line(value))
        return folder

    def snapshot(self) -> dict:
        return tree(self.tmp, {self.store, self.landing})

    def assert_untouched(self) -> None:
        assert self.snapshot() == self.before
        assert not (self.tmp.parent / "escaped-0").exists()

    def store_logs(self) -> list[str]:
        return LogStore(str(self.store)).logs()


@pytest.fixture
def roots(tmp_path):
    return Roots(tmp_path)


def cli_run(capsys, *args) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


BAD_LOG_NAMES = [
    "../outside/evil-0",
    "../x-0",
    "../../escaped-0",
    "ok-0/../../outside/evil-0",
    "",
    ".-0",
    "..-0",
    "x" * 249 + "a-0",
    "bad topic-0",
    "bad$-0",
    "ünï-0",
    "x-abc",
    "x-",
    "x-01",
    "x--",
    "x-1.5",
    "x-+1",
    "x-2147483648",
    "evil-0\n",
    "a\\b-0",
    "x\x00-0",
]


@pytest.mark.parametrize("name", BAD_LOG_NAMES + ["<absolute>"], ids=lambda n: repr(n)[:40])
def test_bad_log_names_refused_by_every_command(roots, capsys, name):
    if name == "<absolute>":
        name = str(roots.tmp / "outside" / "evil-0")
    good_file = roots.landing / "ok" / "partition=1" / "a.jsonl"
    base = ("--store", str(roots.store), "--topics", str(roots.topics))
    commands = [
        ["describe", name],
        ["read", name],
        ["latest-state", name],
        ["append", name, str(good_file)],
        ["set-log-start", name, "0"],
        ["set-checkpoint", name, "0"],
        ["clear-uncleanable", name],
        ["gc", name],
        ["clean", name],
        ["clean", "ok-0", name],
        ["plan", name],
        ["ingest", name, "--landing", str(roots.landing)],
    ]
    for command in commands:
        rc, out, err = cli_run(capsys, *base, *command)
        assert rc == 1, (command, out, err)
        assert out == "" and len(err.splitlines()) == 1 and err.startswith("error: log name "), (command, err)
        assert repr(name) in err, err
        assert SECRET not in out + err
    assert roots.store_logs() == ["ok-0"]
    assert sorted(os.listdir(roots.store)) == ["ok-0"]
    roots.assert_untouched()


BAD_TOPICS = ["../outside/evil", "../x", "/abs/x", "", ".", "..", "x" * 250, "a b", "ünï", "a/b", "a\\b", "t\n"]


@pytest.mark.parametrize("topic", BAD_TOPICS, ids=lambda n: repr(n)[:40])
def test_bad_topic_names_in_the_topics_file_refused(roots, capsys, topic):
    roots.topics.write_text(json.dumps({"topics": {topic: {"segment.bytes": 100}}}))  # JSON is YAML
    roots.before = roots.snapshot()
    for command in (["logs"], ["ingest", "--landing", str(roots.landing)], ["describe", "ok-0"]):
        rc, out, err = cli_run(capsys, "--store", str(roots.store), "--topics", str(roots.topics), *command)
        assert rc == 1 and out == "" and len(err.splitlines()) == 1, err
        assert "topic" in err and repr(topic) in err, err
    assert LogStore(str(roots.store)).log("ok-0").manifest().ingested == ()
    roots.assert_untouched()


def plant_bad_landing_folders(roots: Roots) -> list[str]:
    """Landing folders whose names are not allowed, each holding a file; and links leading outside."""
    bad = []
    for topic_dir in ("bad topic", "x" * 250, "ünï", "a$b", "q?mark"):
        roots.land(topic_dir, "partition=0")
        bad.append(topic_dir)
    for part_dir in (
        "partition=abc",
        "partition=-1",
        "partition=01",
        "partition=",
        "partition=1.5",
        "partition=2147483648",
        "p=0",
        "partition=0 ",
        "partition=0\n",
    ):
        roots.land("ok", part_dir)
        bad.append(part_dir)
    os.symlink(roots.tmp / "outside", roots.landing / "linked")  # a topic folder
    os.symlink(roots.tmp / "outside" / "landing" / "partition=0", roots.landing / "ok" / "partition=7")
    # a file of a good partition folder that is a link to a file outside (absolute, and relative with ..)
    os.symlink(
        roots.tmp / "outside" / "landing" / "partition=0" / "a.jsonl", roots.landing / "ok" / "partition=1" / "b.jsonl"
    )
    os.symlink("../../../outside/landing/partition=0/a.jsonl", roots.landing / "ok" / "partition=1" / "c.jsonl")
    assert (roots.landing / "ok" / "partition=1" / "c.jsonl").read_text() == roots.line(SECRET)
    return bad


def test_bad_landing_folder_names_are_ignored_by_ingestion(roots, capsys):
    bad = plant_bad_landing_folders(roots)
    roots.before = roots.snapshot()
    rc, out, err = cli_run(
        capsys, "--store", str(roots.store), "--topics", str(roots.topics), "ingest", "--landing", str(roots.landing)
    )
    assert rc == 0, err
    assert sorted(json.loads(out)) == ["ok-1"]  # the one good folder
    ignored = [line for line in err.splitlines() if "ignored:" in line]
    assert len(ignored) == len(bad), ignored
    assert roots.store_logs() == ["ok-0", "ok-1"] and sorted(os.listdir(roots.store)) == [
        "_tables",
        "_topics",
        "ok-0",
        "ok-1",
    ]  # + the topic tables (the ingestion commits them) and the stored configuration
    for log in ("ok-0", "ok-1"):
        assert all(SECRET not in (r.value or b"").decode() for r in iter_records(LogStore(str(roots.store)).log(log)))
    roots.assert_untouched()


def test_bad_names_never_become_dagster_partitions_and_bad_keys_are_refused(roots):
    plant_bad_landing_folders(roots)
    roots.before = roots.snapshot()
    resource = LogStoreResource(
        root=str(roots.store),
        landing=str(roots.landing),
        topics_file=str(roots.topics),
        latest_state_root=str(roots.tmp / "latest"),
    )
    resources = {"log_store": resource, "pyspark": LazyPySparkResource(spark_config={})}
    with dg.instance_for_test() as instance:
        # the discovery sensor proposes only the valid logs
        with dg.build_sensor_context(instance_ref=instance.get_ref(), resources=resources, definitions=defs) as context:
            tick = log_discovery_sensor.evaluate_tick(context)
        assert sorted(tick.dynamic_partitions_requests[0].partition_keys) == ["ok-0", "ok-1"]
        assert [r.partition_key for r in tick.run_requests] == ["ok-1"]
        # a partition key added by hand (Dagster itself accepts any string) is refused by every asset
        keys = ["../outside/evil-0", str(roots.tmp / "outside" / "evil-0"), "bad topic-0", "x-01", "../../escaped-0"]
        instance.add_dynamic_partitions(log_partitions.name, keys)
        runs = [
            (key, asset) for asset in (raw_segments, cleanable_range, compacted_log, latest_state) for key in keys[:1]
        ] + [(key, raw_segments) for key in keys[1:]]
        for key, asset in runs:
            result = materialize([asset], key, resources, instance, raise_on_error=False)
            assert not result.success, (key, asset.key)
            failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
            message = failure.event_specific_data.error.message
            assert "partition key" in message and repr(key) in message, message
            assert SECRET not in message
    assert roots.store_logs() == ["ok-0"]
    assert not (roots.tmp / "latest").exists()
    roots.assert_untouched()


# --- a landed path that becomes a link between discovery and reading --------------------------------------
# Discovery ignores links; a sensor or a run reads the files it discovered a moment later, so a file or folder
# replaced by a link in between must still not lead the read outside the landing root.

SWAPS = ["file", "partition folder", "topic folder"]


def plant_outside_copy(roots: Roots, landed: Path, outside: Path) -> None:
    """The same relative path as `landed`, under `outside`, holding the secret."""
    copy = outside / landed.relative_to(roots.landing)
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(landed.read_text().replace("inside", SECRET))


@pytest.mark.parametrize("swap", SWAPS)
@pytest.mark.parametrize("layout", ["native", "aiven"])
def test_a_landed_path_swapped_for_a_link_after_discovery_is_not_read(roots, swap, layout):
    from compaction_assets.errors import InvalidInputError
    from compaction_assets.ingest.landing import ingest, landing_logs

    if layout == "aiven":  # a connector's layout: Aiven's `<topic>-<p>-<start>` files in a folder
        landed = roots.landing / "ok" / "partition=1" / "ok-1-0.json"
        landed.write_text(json.dumps([{"key": "k", "value": "inside", "offset": 0, "timestamp": 1}]))
        (roots.landing / "ok" / "partition=1" / "a.jsonl").unlink()
    else:
        landed = roots.landing / "ok" / "partition=1" / "a.jsonl"
    outside = roots.tmp / "outside" / "swapped"
    plant_outside_copy(roots, landed, outside)
    source = landing_logs(str(roots.landing))[0]["ok-1"]
    assert [f.name for f in source.files] == [landed.name]
    if swap == "file":
        os.rename(landed, roots.tmp / "moved-away")
        landed.symlink_to(outside / landed.relative_to(roots.landing))
    else:
        here = landed.parent if swap == "partition folder" else landed.parent.parent
        os.rename(here, roots.tmp / "moved-away")
        here.symlink_to(outside / here.relative_to(roots.landing), target_is_directory=True)
    roots.before = roots.snapshot()
    handle = LogStore(str(roots.store)).log("ok-1")
    with pytest.raises(InvalidInputError) as info:
        ingest(handle, build_config({"landing.format": layout}), source)
    message = str(info.value)
    assert "outside the landing area" in message and landed.name in message and "\n" not in message, message
    assert SECRET not in message
    assert roots.store_logs() == ["ok-0"]  # nothing appended: no log ok-1
    roots.assert_untouched()


# --- every Dagster job that takes a log or topic name in its run config (the launchpad's entry points) ----


def job_configs(evil_log: str, evil_topic: str, topics_file: Path) -> list[tuple[object, dict]]:
    from compaction_assets.defs.batches.jobs import compaction_batch_job, ingest_batch_job
    from compaction_assets.defs.config_job import apply_topics_config_job
    from compaction_assets.defs.forget import forget_job
    from compaction_assets.defs.jobs import (
        clear_uncleanable_job,
        clear_uncleanable_logs_job,
        gc_job,
        retention_job,
        set_checkpoint_job,
        set_log_start_job,
    )
    from compaction_assets.defs.table.freshness import table_catch_up_job

    return [
        (clear_uncleanable_job, {"log": evil_log}),
        (clear_uncleanable_logs_job, {"logs": [evil_log]}),
        (set_checkpoint_job, {"log": evil_log, "offset": 0}),
        (set_log_start_job, {"log": evil_log, "offset": 1, "confirm": evil_log}),
        (gc_job, {"logs": [evil_log]}),
        (retention_job, {"logs": [evil_log]}),
        (table_catch_up_job, {"logs": [evil_log]}),
        (compaction_batch_job, {"logs": [evil_log]}),
        (ingest_batch_job, {"logs": [evil_log]}),
        (forget_job, {"topic": evil_topic, "keys": ["k"]}),
        (apply_topics_config_job, {"topics_file": str(topics_file)}),
    ]


@pytest.mark.parametrize("evil", ["../outside/evil-0", "<absolute>", "ok-0/../../outside/evil-0"], ids=repr)
def test_bad_names_in_every_dagster_job_config_are_refused(roots, evil):
    if evil == "<absolute>":
        evil = str(roots.tmp / "outside" / "evil-0")
    evil_topic = evil.rsplit("-", 1)[0]
    topics_file = roots.tmp / "evil-topics.yaml"
    topics_file.write_text(json.dumps({"topics": {evil_topic: {"segment.bytes": 100}}}))
    roots.before = roots.snapshot()
    resources = {
        "log_store": LogStoreResource(
            root=str(roots.store),
            landing=str(roots.landing),
            topics_file=str(roots.topics),
            latest_state_root=str(roots.tmp / "latest"),
        ),
        "pyspark": LazyPySparkResource(spark_config={}),
    }
    with dg.instance_for_test() as instance:
        for job, config in job_configs(evil, evil_topic, topics_file):
            ops = {node.name: {"config": config} for node in job.graph.node_defs if node.config_schema}
            result = job.execute_in_process(
                run_config={"ops": ops},
                instance=instance,
                resources={k: v for k, v in resources.items() if k in job.required_resource_keys},
                raise_on_error=False,
            )
            assert not result.success, job.name
            failures = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
            message = failures[0].event_specific_data.error.message
            assert "not a valid Kafka topic name" in message or "not of the form" in message, (job.name, message)
            assert SECRET not in message
    assert roots.store_logs() == ["ok-0"]
    assert not (roots.tmp / "latest").exists()
    roots.assert_untouched()
