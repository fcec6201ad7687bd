"""The main job: a realistic changelog taken end to end through the Dagster code location.

User profiles over 3 partitions of `user-profiles` (updates, ~5% deletes) and `user-profiles-versioned`
(the `header` strategy, with late records carrying older versions), landed as Kafka Connect sinks
write them: <landing>/<topic>/partition=<p>/<file> (compaction_assets/demo/changelog.py); and
`users-cdc`, Debezium change events in Confluent's S3 sink layout (compaction_assets/demo/cdc.py).
`python -m compaction_assets.demo` then runs,
headless and on the Dagster instance in $DAGSTER_HOME: discovery (sensor tick), ingestion, plan,
cleaning with its checks, latest state, in the runs the discovery sensor requests (one `ingest_batch_job`
for the logs: the batch a fleet takes); and prints a summary. `scripts/ui.sh` opens the same data.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from compaction_assets import settings
from compaction_assets.demo.cdc import LOG as CDC_LOG
from compaction_assets.demo.cdc import TOPIC as CDC_TOPIC
from compaction_assets.demo.cdc import deleted_row_line
from compaction_assets.demo.changelog import write_landing

DEMO_TOPICS = ("user-profiles", "user-profiles-versioned", CDC_TOPIC)
DEMO_LOGS = ("user-profiles-0", "user-profiles-1", "user-profiles-2", "user-profiles-versioned-0", CDC_LOG)
# Written at the store's root: the logs and landing files the demo made, the only ones it may replace.
DEMO_MARKER = "_demo.json"


class DemoRefused(Exception):
    """The demo's folders hold data it did not make: it touches nothing."""


def prepare_folders(store_root: str, landing: str, latest_state_root: str) -> None:
    """Make room for a fresh demo run, deleting only what an earlier demo run made (the marker says what);
    refuse, before anything is deleted or written, when the store or the demo's landing folders hold data
    the demo did not make."""
    from compaction_assets.store.fs import Storage
    from compaction_assets.store.log_store import LogStore

    store = LogStore(store_root)
    marker_path = store.storage.join(DEMO_MARKER)
    made: dict[str, list[str]] = {"logs": [], "landing_files": []}
    if store.storage.exists(marker_path):
        made = json.loads(store.storage.read_bytes(marker_path))
    foreign = [name for name in store.logs() if name not in made["logs"]]
    if foreign:
        raise DemoRefused(
            f"the store {store_root} holds logs the demo did not make ({', '.join(foreign[:5])}); "
            "it deletes nothing: point COMPACTION_STORE (and COMPACTION_LANDING, "
            "COMPACTION_LATEST_STATE) at other folders, or move those logs"
        )
    mine = {os.path.abspath(f) for f in made["landing_files"]}
    theirs = [
        str(f)
        for topic in DEMO_TOPICS
        for f in sorted(Path(landing, topic).rglob("*"))
        if f.is_file() and str(f.absolute()) not in mine
    ]
    if theirs:
        raise DemoRefused(
            f"the landing folder {landing} holds files the demo did not write ({theirs[0]}"
            f"{' ...' if len(theirs) > 1 else ''}); it deletes nothing: point COMPACTION_LANDING "
            "at another folder, or move them"
        )
    for name in made["logs"]:
        store.storage.delete(store.storage.join(name))
    for f in made["landing_files"]:
        if os.path.isfile(f):
            os.unlink(f)
    latest = Storage.open(latest_state_root)
    for name in made["logs"]:
        latest.delete(latest.join(name))
    store.storage.makedirs(store.storage.root)
    store.storage.write_atomic(marker_path, json.dumps({"logs": list(DEMO_LOGS), "landing_files": []}).encode())


def record_landing(store_root: str, files: list[Path]) -> None:
    """Add the landing files the demo wrote to its marker (so the next run may replace them)."""
    from compaction_assets.store.log_store import LogStore

    st = LogStore(store_root).storage
    path = st.join(DEMO_MARKER)
    made = json.loads(st.read_bytes(path))
    made["landing_files"] = sorted({*made["landing_files"], *(str(Path(f).absolute()) for f in files)})
    st.write_atomic(path, json.dumps(made).encode())


def apply_demo_topics(store_root: str, topics_file: str) -> None:
    """Store the repository's topics.yaml in the demo's store, its defaults and topics, as `config apply`
    does (an explicit change, recorded): a topic added later, by the CLI or by Dagster, gets its defaults."""
    from compaction_assets.store.log_store import LogStore, wall_ms
    from compaction_assets.topics.applied_file import apply_topics_file
    from compaction_assets.topics.config_store import ConfigStore, logged_topics

    store = LogStore(store_root)
    source = f"demo: config apply {os.path.abspath(topics_file)}"
    # the demo replaces its own logs, so a strategy of its topics may change without --confirm
    apply_topics_file(ConfigStore(store.storage), topics_file, source, wall_ms(), logged_topics(store), None)


# The daemon's run queue looks for queued runs every 5 s unless told otherwise: a batch a sensor requested
# waited up to that long before its process even started (bench/fleet_daemon.py times requested to started).
DEQUEUE_INTERVAL_S = 1
# Runs dequeued at once are launched in this many threads, not one after another: each launch waits until
# the run's new process has imported Dagster and opened the instance.
DEQUEUE_WORKERS = 4


def instance_yaml(dequeue_interval_s: int = DEQUEUE_INTERVAL_S) -> str:
    """The dagster.yaml the demo, scripts/ui.sh and bench/fleet_daemon.py write: telemetry off, the Spark
    pool's limit, held by whole runs (docs/dagster.md, "Concurrency and retries": a run waits for a slot in
    the queue, not started) and the run queue's dequeue interval and its launching threads."""
    return (
        "telemetry:\n  enabled: false\nconcurrency:\n  pools:\n    default_limit: 2\n    granularity: run\n"
        f"run_queue:\n  dequeue_interval_seconds: {dequeue_interval_s}\n"
        f"  dequeue_use_threads: true\n  dequeue_num_workers: {DEQUEUE_WORKERS}\n"
    )


def _instance_home() -> str:
    home = settings.export_default(settings.DAGSTER_HOME, os.path.abspath(os.path.join("var", "dagster_home")))
    os.makedirs(home, exist_ok=True)
    cfg = os.path.join(home, "dagster.yaml")
    if not os.path.exists(cfg):
        with open(cfg, "w") as fh:
            fh.write(instance_yaml())
    return home


QUIET_RUNS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
# From this many due logs a tick the sensors start batch runs (settings.BATCH_MIN_LOGS; 10 by default): the
# demo's few logs take the path a fleet takes, one ingest_batch_job that ingests and cleans them all.
DEMO_BATCH_MIN_LOGS = "2"


def discover(defs, instance) -> tuple[list[str], list]:
    """One tick of the discovery sensor: adds its partitions; the demo's logs among them and the runs it
    requested."""
    import dagster as dg

    from compaction_assets.defs.partitions import LOG_PARTITIONS

    # closed when done: the context enters an instance of its own, which must not outlive it
    with dg.build_sensor_context(
        instance_ref=instance.get_ref(), definitions=defs, resources=defs.resources
    ) as context:
        tick = defs.resolve_sensor_def("log_discovery_sensor").evaluate_tick(context)
    for request in tick.dynamic_partitions_requests:
        instance.add_dynamic_partitions(LOG_PARTITIONS, list(request.partition_keys))
    logs = sorted(set(instance.get_dynamic_partitions(LOG_PARTITIONS)) & set(DEMO_LOGS))
    return logs, [r for r in (demo_request(request) for request in tick.run_requests) if r is not None]


def demo_request(request):
    """A sensor's run request narrowed to the demo's logs (None when it names none of them): the landing
    area may hold other topics' folders, which the demo neither ingests nor touches."""
    from compaction_assets.defs.batches.requests import batch_tags

    if request.partition_key is not None:
        return request if request.partition_key in DEMO_LOGS else None
    ops = (request.run_config or {}).get("ops", {})
    op, op_config = next(iter(ops.items()))  # a batch request: one op, configured with its logs
    logs = [log for log in op_config["config"]["logs"] if log in DEMO_LOGS]
    if not logs:
        return None
    config = {"ops": {op: {"config": {**op_config["config"], "logs": logs}}}}
    return request.with_replaced_attrs(run_config=config, tags={**request.tags, **batch_tags(logs)})


def launch(defs, instance, requests: list) -> list:
    """Run the sensor's requests as the daemon launches them, in this process: each its job, partition,
    config and tags (a batch: `ingest_batch_job`, which ingests its logs, then cleans those due with their
    checks and latest state; a failing blocking check stops that log's latest state only)."""
    results = []
    for request in requests:
        config = {**QUIET_RUNS, **(request.run_config or {})}
        results.append(
            defs.resolve_job_def(request.job_name).execute_in_process(
                partition_key=request.partition_key,
                instance=instance,
                tags={**request.tags, "source": "demo"},
                raise_on_error=False,
                run_config=config,
            )
        )
    return results


def log_history(results: list, log: str) -> tuple[dict, list]:
    """The log's materializations ({asset: metadata}) and check evaluations among the runs' events."""
    mats = {
        e.asset_key.path[-1]: e.materialization.metadata
        for result in results
        for e in result.get_asset_materialization_events()
        if e.materialization.partition == log
    }
    return mats, [c for result in results for c in result.get_asset_check_evaluations() if c.partition == log]


@dataclass
class DemoSummary:
    """The demo's last line (JSON on stdout): what its runs did to the demo's logs, all together."""

    logs: int
    records_before: int = 0
    records_after: int = 0
    checks_passed: int = 0
    checks_failed: int = 0
    keys_in_latest_state: int = 0
    failed_runs: int = 0
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """True when every run succeeded and every check ran and passed (else the demo fails)."""
        return self.checks_failed == 0 and self.failed_runs == 0 and self.checks_passed > 0


def summarize_log(summary: DemoSummary, results: list, log: str) -> None:
    """Add one log's history among the runs' events to `summary`, and print its line on stderr."""
    mats, checks = log_history(results, log)
    success = "latest_state" in mats and all(c.passed for c in checks)
    passed = sum(1 for c in checks if c.passed)
    summary.checks_passed += passed
    summary.checks_failed += len(checks) - passed
    clean = mats.get("compacted_log", {})
    read = clean.get("records_read").value if clean.get("records_read") else 0
    written = clean.get("records_written").value if clean.get("records_written") else 0
    total = mats.get("raw_segments", {}).get("records")
    keys = mats.get("latest_state", {}).get("keys")
    summary.records_before += mats["raw_segments"]["records_appended"].value if "raw_segments" in mats else 0
    summary.records_after += (total.value if total else 0) - read + written
    summary.keys_in_latest_state += keys.value if keys else 0
    print(
        f"{log}: {'ok' if success else 'FAILED'}; cleaned {read} -> {written} records "
        f"({clean.get('reason').value if clean.get('reason') else 'none'}); {passed}/{len(checks)} checks passed",
        file=sys.stderr,
    )


def land(store, events: int) -> None:
    """Make room for the demo in the store's folders (DemoRefused when they hold data it did not make),
    store the demo's topics' configuration and land its changelog files."""
    from resources.log_store import REPO_TOPICS

    prepare_folders(store.store_location(), store.landing_area(), store.latest_state_location())
    apply_demo_topics(store.store_location(), REPO_TOPICS)
    files = write_landing(store.landing_area(), events=events)
    record_landing(store.store_location(), files)
    print(f"landed {len(files)} files under {store.landing_area()}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the demo: land data, then drive every log through the Dagster code location."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m compaction_assets.demo", description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20000, help="change events to land (default %(default)s)")
    args = ap.parse_args(argv)
    _instance_home()  # DAGSTER_HOME is set before Dagster is imported
    import dagster as dg

    from compaction_assets.definitions import defs
    from resources.log_store import REPO_TOPICS

    started = time.monotonic()
    assert defs.resources is not None  # the code location's Definitions bind its resources
    store = defs.resources["log_store"]
    try:
        land(store, args.events)
    except DemoRefused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    instance = dg.DagsterInstance.get()
    settings.export_default(settings.BATCH_MIN_LOGS, DEMO_BATCH_MIN_LOGS)
    logs, requests = discover(defs, instance)
    print(
        f"discovered {len(logs)} logs: {', '.join(logs)}; runs: {', '.join(r.job_name for r in requests)}",
        file=sys.stderr,
    )
    results = launch(defs, instance, requests)
    summary = DemoSummary(logs=len(logs), failed_runs=sum(0 if result.success else 1 for result in results))
    for log in logs:
        summarize_log(summary, results, log)
    if CDC_LOG in logs:
        print(deleted_row_line(store.store_location(), REPO_TOPICS), file=sys.stderr)
    summary.seconds = round(time.monotonic() - started, 1)
    print(json.dumps(asdict(summary)))
    # a run that failed (or checks that did not all pass) fails the demo
    return 0 if summary.passed else 1


if __name__ == "__main__":
    sys.exit(main())
