"""How sensors and schedules ask for batch runs (defs/batches/jobs.py) when a tick finds many logs due.

Fewer than `settings.batches.min_logs` (COMPACTION_BATCH_MIN_LOGS, 10) logs due keep today's one run per
partition (the UI's usual history, a run per log). From there on, the due logs go into few batch runs, in
priority order, each bounded by a number of logs (COMPACTION_BATCH_MAX_LOGS, 250) and by bytes
(COMPACTION_BATCH_MAX_BYTES, 2 GiB) (cleanable bytes from the manifests, or the pending files' size for an
ingestion), so that one huge log does not hold a batch of small ones: a log larger than the bound gets a
batch of its own. Logs that a queued or running batch already holds are left out, so a tick does not
request them twice while their manifests change under the running batch.

A batch's logs are in its run tag `compaction/logs`, compactly (`orders:0-99;users:3,5`), with `topic`
when all its logs are of one topic and `compaction/batch_size`; the UI filters runs by exact tag values,
and a partition's own page links the batch run of each of its materializations.
"""

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

import dagster as dg

from compaction_assets import settings
from compaction_assets.defs.jobs import SPARK_POOL
from compaction_assets.store.names import parse_log_name

SIZE_TAG = "compaction/batch_size"
BATCH_JOBS = ("ingest_batch_job", "compaction_batch_job")
LOGS_TAG = "compaction/logs"  # the batch's logs, compactly (encode_logs, decode_logs)
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


@dataclass(frozen=True)
class Due:
    """One log a tick found due, its weight in bytes, and the state it was found in (for run keys)."""

    log: str
    size: int
    state: str


def encode_logs(logs: list[str]) -> str:
    """`orders:0-2,5;users:1`: the logs grouped by topic, consecutive partitions as ranges."""
    by_topic: dict[str, list[int]] = {}
    for log in logs:
        topic, part = parse_log_name(log, "log")
        by_topic.setdefault(topic, []).append(part)
    groups = []
    for topic, parts in sorted(by_topic.items()):
        spans: list[list[int]] = []  # [first, last] partitions of each run of consecutive ones
        for p in sorted(set(parts)):
            if spans and spans[-1][1] == p - 1:
                spans[-1][1] = p
            else:
                spans.append([p, p])
        groups.append(f"{topic}:" + ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans))
    return ";".join(groups)


def decode_logs(text: str) -> list[str]:
    """The logs of an `encode_logs` string."""
    logs = []
    for group in filter(None, text.split(";")):
        topic, _, spans = group.rpartition(":")
        for span in spans.split(","):
            a, _, b = span.partition("-")
            logs += [f"{topic}-{p}" for p in range(int(a), int(b or a) + 1)]
    return logs


def split(due: list[Due], max_logs: int | None = None, max_bytes: int | None = None) -> list[list[Due]]:
    """The due logs, in order, cut into batches of at most `max_logs` logs and `max_bytes` bytes."""
    bounds = settings.current().batches
    max_logs, max_bytes = max_logs or bounds.max_logs, max_bytes or bounds.max_bytes
    batches: list[list[Due]] = []
    size = 0
    for item in due:
        if not batches or len(batches[-1]) >= max_logs or (batches[-1] and size + item.size > max_bytes):
            batches.append([])
            size = 0
        batches[-1].append(item)
        size += item.size
    return batches


def batched(count: int) -> bool:
    """True when `count` logs due in one tick go into batch runs (settings: COMPACTION_BATCH_MIN_LOGS)."""
    return count >= settings.current().batches.min_logs


def batch_tags(logs: list[str]) -> dict[str, str]:
    """Run tags of a batch: its logs (compactly), their topic when they share one, and how many."""
    topics = {parse_log_name(log, "log")[0] for log in logs}
    return {
        LOGS_TAG: encode_logs(logs),
        SIZE_TAG: str(len(logs)),
        **({"topic": next(iter(topics))} if len(topics) == 1 else {}),
    }


def batch_requests(
    job_name: str, op: str, due: list[Due], now: int, prefix: str, tags: dict[str, str] | None = None
) -> list[dg.RunRequest]:
    """Batch run requests for `due`; a key names the batch's logs and their states, so one state of a
    set of logs never triggers twice."""
    requests = []
    for batch in split(due):
        logs = [d.log for d in batch]
        digest = hashlib.sha1("\n".join(f"{d.log}:{d.state}" for d in batch).encode()).hexdigest()[:16]
        requests.append(
            dg.RunRequest(
                job_name=job_name,
                run_key=f"{prefix}:batch:{digest}",
                tags={**batch_tags(logs), **(tags or {})},
                run_config={"ops": {op: {"config": {"logs": logs, "now_ms": now}}}},
            )
        )
    return requests


def record_pool_limit(instance: dg.DagsterInstance, runs: list[dg.RunRequest]) -> None:
    """Record the Spark pool's default limit in the instance before `runs` are requested (when there are
    any). With `granularity: run` the queue holds a run whose pool is full; Dagster 1.13 records a pool's
    limit when it first sees a queued run of it, after it has decided which runs to launch, so a fresh
    instance's first tick of batch runs would all start at once. Only a tick that requests runs asks (a
    query of the instance), not every tick of the sensors."""
    storage = instance.event_log_storage
    if (
        runs
        and storage.supports_global_concurrency_limits
        and instance.global_op_concurrency_default_limit is not None
        and SPARK_POOL not in storage.get_concurrency_keys()
    ):
        storage.initialize_concurrency_limit_to_default(SPARK_POOL)


def in_flight(instance: dg.DagsterInstance, runs: Sequence[dg.DagsterRun] | None = None) -> set[str]:
    """The logs of the batch runs queued or running (one storage query, none when given the runs in flight)."""
    if runs is None:
        runs = instance.get_runs(filters=dg.RunsFilter(job_name=None, statuses=IN_FLIGHT), limit=500)
    return {
        log
        for run in runs
        if run.job_name in BATCH_JOBS and LOGS_TAG in run.tags
        for log in decode_logs(run.tags[LOGS_TAG])
    }


def pending_bytes(files) -> int:
    """The size of a log's pending landing files when they are local files (else 0: counted by logs)."""
    total = 0
    for f in files:
        path = getattr(f, "path", f)
        try:
            total += os.path.getsize(path)
        except (OSError, TypeError):
            pass
    return total
