"""The Spark pool, measured on a real instance: compaction runs of several logs started at once (one
process each, as the run launcher starts them) never run more Spark steps at the same time than the
pool's limit; the overlap is read from the instance's own step events. The instance is PostgreSQL, as in
production: on SQLite, Dagster's claim of a pool's slot is not atomic across processes (it selects a free
slot `FOR UPDATE SKIP LOCKED`, which SQLite ignores, then takes it by id), and two runs' first steps took
the one slot together in 2 of 8 runs."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from compaction_assets.defs.batches.requests import in_flight, record_pool_limit
from compaction_assets.defs.jobs import SPARK_POOL
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.log import writer
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_000_000_000
SPARK_STEPS = {"cleanable_range", "compacted_log", "latest_state"}


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals open at one instant."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    now = most = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@pytest.mark.slow
@pytest.mark.ci_real
@pytest.mark.parametrize("limit,logs", [(1, 3)])
def test_concurrent_runs_never_exceed_the_spark_pool(tmp_path, postgres_server, monkeypatch, limit, logs):
    home = tmp_path / "dagster_home"
    home.mkdir()
    # the pool by steps (Dagster's default granularity): the runs start together, their Spark steps wait
    (home / "dagster.yaml").write_text(
        f"telemetry: {{enabled: false}}\nstorage:\n  postgres:\n    postgres_url:\n"
        f"      env: DAGSTER_PG_URL\nconcurrency:\n  pools:\n"
        f"    default_limit: {limit}\n"
    )
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_server.new_database(f"pool_{limit}_{logs}"))
    store = LogStore(str(tmp_path / "store"))
    names = [f"users-{p}" for p in range(logs)]
    for name in names:
        writer.append(
            store.log(name),
            build_config({}),
            [{"key": f"k{i % 3}", "value": "v", "timestamp": 100 + i} for i in range(30)],
            now=NOW,
        )
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "COMPACTION_STORE": str(tmp_path / "store"),
        "COMPACTION_LANDING": str(tmp_path / "landing"),
        "COMPACTION_LATEST_STATE": str(tmp_path / "latest"),
        "SPARK_MASTER": "local[1]",
    }
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(log_partitions.name, names)
        # as the sensors do before they request runs: the pool's limit recorded before a run claims a slot
        record_pool_limit(instance, [dg.RunRequest(partition_key=name) for name in names])
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.defs.pool_worker", str(home), name, str(NOW)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in names
    ]
    errors = [w.communicate()[1] for w in workers]
    assert all(w.returncode == 0 for w in workers), "\n".join(e[-1500:] for e in errors)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        spans = []
        runs = [(r.start_time, r.end_time) for r in instance.get_run_records()]
        for record in instance.get_run_records():
            starts, ends = {}, {}
            for entry in instance.all_logs(record.dagster_run.run_id):
                event = entry.get_dagster_event() if entry.is_dagster_event else None
                if event is None or event.step_key not in SPARK_STEPS:
                    continue
                if event.is_step_start:
                    starts[event.step_key] = entry.timestamp
                elif event.is_step_success or event.is_step_failure:
                    ends[event.step_key] = entry.timestamp
            spans += [(starts[k], ends[k]) for k in starts if k in ends]
    assert len(spans) == len(SPARK_STEPS) * logs
    overlap = max_overlap(spans)
    print(
        f"{logs} runs, pool {SPARK_POOL!r} limit {limit}: {max_overlap(runs)} runs at once, "
        f"at most {overlap} Spark step(s) at once"
    )
    # the runs did run at the same time (else the limit would hold without a pool), their Spark steps not
    assert max_overlap(runs) > limit, runs
    assert overlap == limit


def test_the_instance_the_product_writes_has_the_pool_and_a_one_second_run_queue(tmp_path):
    """The demo's and ui.sh's dagster.yaml: Dagster reads the pool's limit, the dequeue interval and the
    launching threads from it."""
    from compaction_assets.demo import DEQUEUE_INTERVAL_S, instance_yaml

    script = (ROOT / "scripts" / "ui.sh").read_text()
    written = subprocess.run(
        ["bash", "-c", script[script.index("printf '") : script.index(' > "$DAGSTER_HOME')]],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert written == instance_yaml()
    (tmp_path / "dagster.yaml").write_text(written)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_coordinator.dequeue_interval_seconds == DEQUEUE_INTERVAL_S == 1
        assert instance.run_coordinator.dequeue_use_threads and instance.run_coordinator.dequeue_num_workers == 4
        assert instance.get_concurrency_config().pool_config.default_pool_limit == 2
        # a run waits for the pool in the queue, not started (Dagster 1.13's in-run wait never sleeps)
        assert instance.get_concurrency_config().pool_config.pool_granularity.value == "run"
        # the queue holds runs only for a pool it has recorded: the sensors record it before any request,
        # and a tick that requests nothing does not ask
        assert instance.event_log_storage.get_concurrency_keys() == set()
        assert in_flight(instance) == set()
        record_pool_limit(instance, [])
        assert instance.event_log_storage.get_concurrency_keys() == set()
        runs = [dg.RunRequest(job_name="compaction_batch_job", run_key="k")]
        record_pool_limit(instance, runs)
        assert instance.event_log_storage.get_concurrency_keys() == {SPARK_POOL}
        assert instance.event_log_storage.get_concurrency_info(SPARK_POOL).slot_count == 2
