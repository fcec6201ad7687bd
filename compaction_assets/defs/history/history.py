"""What one partition's history records, built in one place for both paths that write it: the
single-partition assets (defs/assets.py, defs/checks.py) and the batch jobs (defs/batches/jobs.py). Each
function here returns the metadata of one asset's materialization, or one partition's check results,
so that a partition cleaned in a batch has exactly the history it would have had in a run of its own.
Reading a recorded history back (for the checks, and for a batch's retry) is defs/history/recorded.py's.
"""

from dataclasses import dataclass

import dagster as dg

from compaction_assets.checks.model import LogView
from compaction_assets.checks.specs import (
    AFTER_VERSION,
    BEFORE_VERSION,
    CHECK_SPECS,
    CHECKS_PIN,
    ERROR,
    EVALUATED_AT_MS,
    WARN,
)
from compaction_assets.checks.verify import load_versions, verify_loaded
from compaction_assets.cleaning.decide.decision import CleaningStats
from compaction_assets.cleaning.engine import DryRun, StepReport
from compaction_assets.defs.table.table import LATEST_STATE, TABLE_CHECK, TopicRows, commit_table, compare_table
from compaction_assets.ingest.report import IngestReport
from compaction_assets.state.latest_state import fits_in_process, latest_state_table, state_path, write_latest_state
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogHandle
from compaction_assets.table.commit.group import TopicBatch
from resources.log_store import LogStoreResource

SEVERITY = {ERROR: dg.AssetCheckSeverity.ERROR, WARN: dg.AssetCheckSeverity.WARN}
COMPACTED_LOG = dg.AssetKey("compacted_log")
SPECS = {spec.name: spec for spec in CHECK_SPECS}


def raw_segments_metadata(report: IngestReport, handle: LogHandle) -> dict:
    """raw_segments' metadata: what an ingestion appended, and the log's size after it."""
    m = handle.manifest()
    return {
        "files_ingested": report.files_ingested,
        "records_appended": report.records_appended,
        "invalid_records_dropped": report.invalid_records_dropped,
        "files_set_aside": len(report.set_aside),  # passed over: `compaction landing release` puts them back
        "log_end_offset": m.log_end_offset,
        "records": m.total_records,
        "size_bytes": m.total_size,
        "segments": len(m.segments),
        "files": dg.MetadataValue.json(list(report.files[-50:])),
        "path": report.path,  # where the files were read and shaped (ingest/route.py), and why
        "why": report.why,
    }


def cleanable_range_metadata(dry: DryRun, now: int) -> dict:
    """cleanable_range's metadata: the plan and what the dry run says would go."""
    ev = dry.evaluation
    metadata = {
        "first_dirty_offset": ev.first_dirty_offset,
        "first_uncleanable_offset": ev.first_uncleanable_offset,
        "dirty_ratio": float(ev.dirty_ratio),
        "max_compaction_delay_ms": ev.max_compaction_delay_ms,
        "eligible": ev.eligible,
        "reason": str(dry.reason or "none"),
        "would_remove_by_retention_records": dry.retention.records,
        "segments_in_range": dry.segments_in_range,
        "evaluated_at_ms": now,
    }
    superseded, expired = dry.superseded, dry.tombstones_expired
    # key-level figures only when asked for (dry_run_detail): they cost a Spark job; a dry run without
    # detail has none
    if dry.detail and superseded is not None and expired is not None:
        metadata.update(
            {
                "would_remove_superseded_records": superseded.records,
                "would_remove_superseded_bytes": superseded.bytes,
                "would_remove_expired_tombstones": expired.records,
                "segments_to_rewrite": dry.segments_to_rewrite,
                "segments_to_mark": dry.segments_to_mark,
            }
        )
    return metadata


def config_metadata(log_store: LogStoreResource, log: str) -> dict:
    """The configuration the step used: the Kafka keys, their stored version and who set them."""
    src = log_store.config_source(log)
    return {
        "config": dg.MetadataValue.json(src.config),
        "config_version": src.version,
        "config_source": src.source.value,
        "config_changed_by": src.changed_by or "built-in",
    }


def compacted_log_metadata(log_store: LogStoreResource, handle: LogHandle, rep: StepReport, now: int) -> dict:
    """compacted_log's metadata; pins the two versions the checks re-read (now or re-run from the UI)."""
    if handle.exists():
        handle.pin_versions(CHECKS_PIN, (rep.before_version, rep.after_version))
    ev, s = rep.evaluation, rep.stats or CleaningStats()
    return {
        "cleaned": rep.cleaned,
        "reason": str(rep.reason or "none"),
        "first_dirty_offset": ev.first_dirty_offset,
        "first_uncleanable_offset": ev.first_uncleanable_offset,
        "dirty_ratio": float(ev.dirty_ratio),
        "max_compaction_delay_ms": ev.max_compaction_delay_ms,
        "records_read": s.records_read,
        "records_written": s.records_written,
        "records_superseded": s.records_superseded,
        "tombstones_stamped": s.tombstones_stamped,
        "tombstones_removed": s.tombstones_removed,
        "bytes_read": s.bytes_read,
        "bytes_written": s.bytes_written,
        "cleaner_recopy_percent": float(s.cleaner_recopy_percent),
        "clean_time_secs": float(s.clean_time_secs),
        "checkpoint": rep.checkpoint,
        "retention_removed_records": rep.retention.records if rep.retention else 0,
        **config_metadata(log_store, handle.name),
        # what the checks verify: the versions the cleaning read and wrote, and its time
        BEFORE_VERSION: rep.before_version,
        AFTER_VERSION: rep.after_version,
        EVALUATED_AT_MS: now,
    }


def latest_state_metadata(
    log_store: LogStoreResource, handle: LogHandle, spark, tables: TopicBatch | None = None
) -> dict:
    """Write the log's key -> value table for its current version and commit it to the topic's table, or,
    in a batch, add it to the batch's `tables` (committed per topic after the cleanings, without its table
    metadata here); latest_state's metadata."""
    m = handle.manifest()
    # A local path or a URI (s3://, gs://, hdfs://...): on a cluster it must be one the executors see.
    st = Storage.open(log_store.latest_state_location())
    log = handle.name
    folder, target = st.join(log), st.join(log, f"version={m.version}")
    # a small log is written with Arrow here: no Spark session starts for it
    cfg = log_store.config_for(log)
    # built once, for the Parquet files and the table's commit both (a log too big for it goes through Spark)
    state = latest_state_table(handle, cfg, m) if fits_in_process(m) else None
    path, why = state_path(handle, cfg, m)  # asked before the state holds memory, as write_latest_state asks
    keys = write_latest_state(handle, cfg, st, target, spark, m, state)
    for old in st.list_dir(folder):  # keep this version and the one before (readers in flight)
        if old.startswith("version=") and old != f"version={m.version}" and int(old.split("=")[1]) < m.version - 1:
            st.delete(st.join(log, old))
    # the topic's Iceberg table too (defs/table/table.py); a batch's logs of a topic share a snapshot
    # (table/commit/group.py)
    if tables is not None:
        tables.add(handle, cfg, m, state)
        table = {}
    else:
        table = commit_table(handle, cfg, m, state=state)
    return {
        "keys": keys,
        "path": dg.MetadataValue.path(target if st.local else f"{st.scheme}://{target}"),
        "log_version": m.version,
        "latest_state_path": path,  # in-process or spark, and why (the process's memory budget)
        "latest_state_why": why,
        **table,
    }


@dataclass(frozen=True)
class Cleaning:
    """A cleaning as its compacted_log materialization records it: what the checks verify."""

    before: int
    after: int
    now: int
    cleaned: bool
    run: str


@dataclass(frozen=True)
class CheckRecord:
    """One check's result on one partition, in the form both paths turn into Dagster events."""

    name: str
    passed: bool
    description: str
    metadata: dict
    severity: dg.AssetCheckSeverity
    blocking: bool
    asset_key: dg.AssetKey = COMPACTED_LOG

    @property
    def blocks(self) -> bool:
        """True when this failed result stops what is downstream of the checked asset in this partition."""
        return not self.passed and self.blocking

    def result(self) -> dg.AssetCheckResult:
        """As the single-partition check step yields it."""
        return dg.AssetCheckResult(
            check_name=self.name,
            asset_key=self.asset_key,
            passed=self.passed,
            severity=self.severity,
            description=self.description,
            metadata=self.metadata,
        )

    def evaluation(self, log: str) -> dg.AssetCheckEvaluation:
        """As a batch run logs it: the same result, with its partition (it follows the materialization it
        verifies, as in a run of the partition's own)."""
        return dg.AssetCheckEvaluation(
            asset_key=self.asset_key,
            check_name=self.name,
            passed=self.passed,
            metadata=self.metadata,
            severity=self.severity,
            description=self.description,
            blocking=self.blocking,
            partition=log,
        )


def check_records(
    log_store: LogStoreResource, log: str, cleaning: Cleaning, selected: tuple[str, ...] | None = None
) -> list[CheckRecord]:
    """Verify a recorded cleaning (raises CompactionError when it cannot be, e.g. a version gone)."""
    return checked(log_store, log, cleaning, selected)[0]


def checked(
    log_store: LogStoreResource, log: str, cleaning: Cleaning, selected: tuple[str, ...] | None = None
) -> tuple[list[CheckRecord], LogView]:
    """`check_records`, and the version after the cleaning as the checks read it (for the table check)."""
    loaded = load_versions(
        log_store.handle(log),
        log_store.config_for(log),
        cleaning.before,
        cleaning.after,
        cleaning.now,
        cleaning.cleaned,
    )
    outcomes = verify_loaded(loaded, selected)
    return [
        CheckRecord(
            o.name,
            o.passed,
            o.description,
            {
                **o.metadata,
                "log": log,
                "before_version": cleaning.before,
                "after_version": cleaning.after,
                "cleaning_run": cleaning.run,
            },
            SEVERITY[SPECS[o.name].severity],
            SPECS[o.name].blocking,
        )
        for o in outcomes
    ], loaded.after


def table_check_record(
    log_store: LogStoreResource, log: str, view: LogView | None = None, topic_rows: TopicRows | None = None
) -> CheckRecord:
    """The table check's result: the partition's rows of its topic's table against the checks' model
    (raises CompactionError when the table reflects no version of the log); `view`, `topic_rows` as
    compare_table."""
    outcome, ident, version = compare_table(log_store, log, view, topic_rows)
    return CheckRecord(
        TABLE_CHECK,
        outcome.passed,
        outcome.describe(),
        {
            "log": log,
            "table": ident,
            "log_version": version,
            "expected_keys": outcome.expected,
            "table_keys": outcome.found,
        },
        dg.AssetCheckSeverity.ERROR,
        True,
        LATEST_STATE,
    )
