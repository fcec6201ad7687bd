"""Sensors. They read manifests only (no Spark): the planner's evaluation is metadata arithmetic.

- log_discovery_sensor: adds a partition per new log or landing folder; starts ingestion of new files
  (not of files set aside); observes each log's landing backlog when it changes (defs/automation/landing.py).
- dirty_ratio_sensor: starts a cleaning per log eligible by dirty ratio; records every log's dirty
  ratio, delay and uncleanable state as observations so the UI charts them between runs (named
  `observed_*`: a partition's page keeps them apart from what a cleaning's materialization says), and the
  across-logs figures (uncleanable-partitions-count, uncleanable-bytes, max-dirty-percent, ...) as an
  observation of compacted_log without a partition.
- max_compaction_lag_sensor: starts a cleaning per log that is due by max.compaction.lag.ms or whose
  tombstones passed their delete horizon.
Run keys carry the log's manifest version (an ingestion's: its new files and the topic's configuration
version), so one state never triggers twice; run tags carry the log, its topic and partition (filters in
the UI). Every tick evaluates at `clock.now_ms()`, which tests set.
When a tick finds at least COMPACTION_BATCH_MIN_LOGS (10) logs due, it starts few batch runs
(defs/batches/jobs.py) instead of one run per log.
"""

import hashlib
import json
import warnings
from collections.abc import Callable

import dagster as dg

from compaction_assets import settings
from compaction_assets.cleaning import metrics
from compaction_assets.cleaning.metrics import LogState, evaluate_read, figures
from compaction_assets.defs.automation.landing import backlog_observations
from compaction_assets.defs.batches import requests as batch_requests
from compaction_assets.defs.batches.jobs import compaction_batch_job, ingest_batch_job
from compaction_assets.defs.batches.requests import Due
from compaction_assets.defs.clock import now_ms
from compaction_assets.defs.jobs import compaction_job, ingest_job
from compaction_assets.defs.partitions import LOG_PARTITIONS, log_partitions
from compaction_assets.errors import CompactionError
from compaction_assets.ingest.backlog import LandingBacklog, landing_backlog
from compaction_assets.ingest.landing import landing_logs
from compaction_assets.ingest.quarantine import Quarantine
from compaction_assets.planning.planner import Evaluation, order
from compaction_assets.store.deleted_topics import DeletedTopics
from compaction_assets.store.manifest import Manifest
from compaction_assets.store.names import parse_log_name
from resources.log_store import LogStoreResource

# Definitions binds the resources of a sensor's @job targets (the batch jobs) by copying the sensor, and the
# copy passes `owners=[]` to SensorDefinition, which warns that the parameter is in beta though no sensor
# here sets an owner: the demo and the UI test refuse any warning.
warnings.filterwarnings(
    "ignore", category=dg.BetaWarning, message=r"Parameter `owners` of initializer `SensorDefinition.__init__`"
)

INTERVAL_S = 30
# Discovery ticks as often as the daemon's sensor loop runs (every 5 s, Dagster's fixed loop): files that
# land wait for it, and a tick with nothing new costs little next to that interval (bench/sensors.py times
# one over 1,000 landing folders). Its minimum interval is below the loop's: at 5 s, a tick that started a
# little later in its loop than the one before (the sensors tick one after another, in shuffled order)
# made the next loop's tick too early by a fraction of a second, skipped, so files waited up to 10 s
# (docs/performance.md, "Landing to table through the daemon"). The batch it starts cleans the ingested
# logs that are due in the same run, so no cleaning sensor's tick is waited for either.
DISCOVERY_INTERVAL_S = 1


def log_tags(log: str) -> dict[str, str]:
    """Run tags naming the log, its topic and its partition (filters in the UI)."""
    topic, partition = parse_log_name(log, "partition key")
    return {"log": log, "topic": topic, "partition": str(partition)}


def run_request_for(ev: Evaluation, key_prefix: str = "") -> dg.RunRequest:
    """A compaction_job run for one evaluated log; its key carries the log's manifest version."""
    return dg.RunRequest(
        job_name=compaction_job.name,
        partition_key=ev.log,
        run_key=f"{key_prefix}{ev.log}:v{ev.version}:{ev.reason}",
        tags={**log_tags(ev.log), "reason": str(ev.reason), "dirty_ratio": f"{ev.dirty_ratio:.4f}"},
    )


def _ingest_requests(pending: dict[str, list], now: int, config_version: Callable[[str], str]) -> list[dg.RunRequest]:
    """An ingest_job run per log with new files; batch runs when many logs have some. A key names the files
    and the topic's configuration version: a run that failed on its configuration is requested again once
    the configuration changes (the same files and configuration would fail the same way)."""
    due = []
    for log, files in sorted(pending.items()):
        digest = hashlib.sha1("\n".join(p.name for p in files).encode()).hexdigest()[:12]
        due.append(Due(log, batch_requests.pending_bytes(files), f"{digest}:{config_version(log)}"))
    if not batch_requests.batched(len(due)):
        return [
            dg.RunRequest(
                job_name=ingest_job.name, partition_key=d.log, run_key=f"ingest:{d.log}:{d.state}", tags=log_tags(d.log)
            )
            for d in due
        ]
    return batch_requests.batch_requests(ingest_batch_job.name, "ingest_batch_op", due, now, "ingest")


def _backlog(log: str, manifest: Manifest | CompactionError | None, source, aside: list, now: int) -> LandingBacklog:
    """A landed log's backlog from its manifest as the tick read it (None: a landing folder whose log is
    not made yet; an error: raised)."""
    if isinstance(manifest, CompactionError):
        raise manifest
    ingested = manifest.ingested if manifest is not None else ()
    return landing_backlog(log, source, ingested, aside, now)


@dg.sensor(
    jobs=[ingest_job, ingest_batch_job],
    minimum_interval_seconds=DISCOVERY_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def log_discovery_sensor(context: dg.SensorEvaluationContext, log_store: LogStoreResource) -> dg.SensorResult:
    """Add a partition per new log or landing folder, delete those of logs that are gone, and start
    ingestion of new files."""
    store = log_store.store
    known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
    landed, refused = landing_logs(log_store.landing_area(), store.storage)  # less deleted topics' files
    for reason in refused:
        context.log.warning(f"ignored: {reason}")
    current = store.current_logs()  # each log's manifest, read once for the listing and the backlogs
    logs = set(current) | set(landed)
    new = sorted(logs - known)
    # A partition whose log left the store and whose landing folder is gone (or set aside by the deletion
    # of its topic) names nothing any more. Nothing found at all is more likely a store or landing area not
    # mounted than every log removed, unless the store recorded the deletion of their topics.
    deleted = set(DeletedTopics(store.storage).all())
    gone = sorted(log for log in known - logs if logs or parse_log_name(log, "partition key")[0] in deleted)
    pending, backlogs, now = {}, [], now_ms()
    # Logs a queued or running batch holds wait for it: their manifests are not read (a 1,000-log fleet's
    # batches hold every landing folder for minutes, and this tick runs every 5 s beside them).
    held = batch_requests.in_flight(context.instance)
    quarantine = Quarantine(store.storage)
    aside = set(quarantine.logs())  # one listing: only the logs with files set aside have a record to read
    for log in sorted(landed):
        if log in held:
            continue
        try:
            backlog = _backlog(log, current.get(log), landed[log], quarantine.of(log) if log in aside else [], now)
        except CompactionError as exc:
            context.log.warning(f"{log}: {exc}")
            continue
        if log in known:  # a partition added by this tick is observed at the next
            backlogs.append(backlog)
        if backlog.pending:
            pending[log] = list(backlog.pending)
    observed, cursor = backlog_observations(backlogs, context.cursor, set(held) | (set(landed) - known))
    versions: dict[str, str] = {}  # per topic: a tick over many logs of few topics lists each topic's versions once

    def config_version(log: str) -> str:
        topic = parse_log_name(log)[0]
        if topic not in versions:
            versions[topic] = log_store.config_version(log)
        return versions[topic]

    runs = _ingest_requests(pending, now, config_version)
    batch_requests.record_pool_limit(context.instance, runs)
    changes = ([log_partitions.build_add_request(new)] if new else []) + (
        [log_partitions.build_delete_request(gone)] if gone else []
    )
    for log in gone:
        context.log.info(f"{log}: no such log nor landing folder any more; its partition is deleted")
    return dg.SensorResult(
        run_requests=runs,
        dynamic_partitions_requests=changes,
        asset_events=observed,
        cursor=cursor,
        skip_reason=None if runs or changes or observed else dg.SkipReason("no new logs or landing files"),
    )


def observed_metadata(ev: Evaluation, error: str | None) -> dict:
    """A log's evaluation as the sensor observes it, every key `observed_*`: compacted_log's materializations
    carry `dirty_ratio` and `max_compaction_delay_ms` at the cleaning, and one partition's page must not
    plot the sensor's view between runs and the cleaning's as one series."""
    return {
        "observed_dirty_ratio": float(ev.dirty_ratio),
        "observed_max_compaction_delay_ms": ev.max_compaction_delay_ms,
        "observed_cleanable_bytes": ev.cleanable_bytes,
        "observed_eligible": ev.eligible and not ev.uncleanable,
        "observed_why_not_eligible": ev.why_not_eligible or "",
        "observed_uncleanable": ev.uncleanable,
        "observed_uncleanable_error": error or "",
    }


def evaluate_known(log_store: LogStoreResource, known: set[str], now: int, log=None) -> list[LogState]:
    """Evaluate the logs that are partitions (metadata only)."""
    store = log_store.store
    current = store.current_logs()
    states = evaluate_read({n: m for n, m in current.items() if n in known}, log_store.config_per_topic(), now)
    for st in states:
        if st.evaluation is None and log:
            log.warning(f"{st.log}: cannot evaluate: {st.error}")
    return states


def evaluate_all(log_store: LogStoreResource, known: set[str], now: int, log=None) -> list[Evaluation]:
    """Evaluate every log of the store, known or not (metadata only)."""
    return [st.evaluation for st in evaluate_known(log_store, known, now, log) if st.evaluation is not None]


def cleaning_requests(
    instance: dg.DagsterInstance,
    due: list[Evaluation],
    now: int,
    prefix: str = "",
    always_batch: bool = False,
    held: set[str] | None = None,
) -> list[dg.RunRequest]:
    """A compaction_job run per due log (in priority order), or batch runs when many are due. Logs a
    queued or running batch holds (`held`, else read here) wait for it (their manifests change under it:
    new run keys)."""
    held = batch_requests.in_flight(instance) if held is None else held
    due = [ev for ev in due if ev.log not in held]
    if not batch_requests.batched(len(due)) and not always_batch:
        # Runs requested per tick, highest priority first (SPEC §5); the rest wait for the next tick. Dagster
        # validates each requested partition with a storage query, so a tick's time grows with its requests.
        runs = [run_request_for(ev, prefix) for ev in due[: settings.current().max_runs_per_tick]]
    else:
        items = [Due(ev.log, ev.cleanable_bytes, f"v{ev.version}:{ev.reason}") for ev in due]
        reasons = ",".join(sorted({str(ev.reason) for ev in due}))
        runs = batch_requests.batch_requests(
            compaction_batch_job.name, "compaction_batch_op", items, now, f"{prefix}clean", {"reason": reasons}
        )
    batch_requests.record_pool_limit(instance, runs)
    return runs


def _requests(
    instance: dg.DagsterInstance, evals: list[Evaluation], reasons: set[str], now: int, held: set[str] | None = None
) -> list[dg.RunRequest]:
    due = order([e for e in evals if e.eligible and e.reason in reasons and not e.uncleanable])
    return cleaning_requests(instance, due, now, held=held)


STORE_KEY = "<store>"  # cursor entry of the across-logs figures (not a valid log name)


def log_observations(states: list[LogState], last: dict, held: set[str]) -> tuple[list, dict]:
    """The per-log observations of a tick (the logs whose point changed since `last`) and the cursor's points.
    A log a queued or running batch holds is not observed: its state changes under the run, whose
    materializations record it, and each observation is an index write the batch's own writes queue behind
    (1,750 during a 1,000-log fleet, beside its batches' 9,000); it keeps its last point, so its state after
    the batch is observed at the next tick."""
    observations, seen = [], {}
    for st in states:
        ev = st.evaluation
        if ev is None:
            continue
        if ev.log in held:
            if ev.log in last:
                seen[ev.log] = last[ev.log]
            continue
        mark = st.manifest.uncleanable if st.manifest is not None else None
        error = mark.error if mark else None
        point = [round(ev.dirty_ratio, 6), ev.max_compaction_delay_ms, error]
        seen[ev.log] = point
        if last.get(ev.log) != point:  # only changes, so 1,000 quiet logs add nothing per tick
            observations.append(
                dg.AssetObservation(asset_key="compacted_log", partition=ev.log, metadata=observed_metadata(ev, error))
            )
    return observations, seen


def _store_observation(states: list[LogState], last: list | None):
    """The across-logs figures (SPEC §8) as an observation of compacted_log without a partition, when
    they changed since the last tick: uncleanable-partitions-count, uncleanable-bytes and the rest."""
    figures_now = figures(states)
    figs = figures_now.as_dict()
    stuck = figs.pop(metrics.UNCLEANABLE_LOGS)
    point = [
        figures_now.uncleanable_partitions_count,
        figures_now.uncleanable_bytes,
        figures_now.max_dirty_percent,
        sorted(r.log for r in figures_now.uncleanable_logs),
    ]
    if last == point:
        return point, None
    return point, dg.AssetObservation(
        asset_key="compacted_log",
        metadata={
            **{k: (float(v) if isinstance(v, float) else v) for k, v in figs.items()},
            "uncleanable_logs": dg.MetadataValue.json(stuck[:50]),
        },
    )


@dg.sensor(
    jobs=[compaction_job, compaction_batch_job],
    minimum_interval_seconds=INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def dirty_ratio_sensor(context: dg.SensorEvaluationContext, log_store: LogStoreResource) -> dg.SensorResult:
    """Start a cleaning per log eligible by dirty ratio; record figures as observations."""
    now = now_ms()
    known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
    states = evaluate_known(log_store, known, now, context.log)
    evals = [st.evaluation for st in states if st.evaluation is not None]
    last = json.loads(context.cursor) if context.cursor else {}
    held = batch_requests.in_flight(context.instance)
    observations, seen = log_observations(states, last, held)
    store_obs = _store_observation(states, last.get(STORE_KEY))
    seen[STORE_KEY] = store_obs[0]
    if store_obs[1] is not None:
        observations.append(store_obs[1])
    runs = _requests(context.instance, evals, {"dirty_ratio"}, now, held)
    return dg.SensorResult(
        run_requests=runs,
        asset_events=observations,
        cursor=json.dumps(seen),
        skip_reason=None
        if runs
        else dg.SkipReason(f"{len(evals)} log(s) evaluated, none above its min.cleanable.dirty.ratio"),
    )


@dg.sensor(
    jobs=[compaction_job, compaction_batch_job],
    minimum_interval_seconds=INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def max_compaction_lag_sensor(context: dg.SensorEvaluationContext, log_store: LogStoreResource) -> dg.SensorResult:
    """Start a cleaning per log due by max.compaction.lag.ms or by a passed delete horizon."""
    known = set(context.instance.get_dynamic_partitions(LOG_PARTITIONS))
    now = now_ms()
    evals = evaluate_all(log_store, known, now, context.log)
    runs = _requests(context.instance, evals, {"max_compaction_lag", "delete_horizon"}, now)
    return dg.SensorResult(
        run_requests=runs,
        skip_reason=None
        if runs
        else dg.SkipReason(f"{len(evals)} log(s) evaluated, none past max.compaction.lag.ms or a delete horizon"),
    )
