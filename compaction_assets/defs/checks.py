"""The four asset checks of `compacted_log`, per partition (names and severities: checks/specs.py).

They verify the last cleaning recorded in the partition's latest materialization (the manifest versions
it read and wrote, and its time), so they run after the cleaning in the same job and can be re-run from
the UI (asset `compacted_log` -> Checks -> Execute, for a partition) without cleaning again. The
versions stay available until the next cleaning replaces the pin the asset set on them.
"""

import warnings

import dagster as dg

from compaction_assets.checks.specs import (AFTER_VERSION, BEFORE_VERSION, CHECK_SPECS, ERROR, EVALUATED_AT_MS,
                                            WARN)
from compaction_assets.checks.verify import verify_versions
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.errors import CompactionError, LogNameError
from compaction_assets.log.names import parse_log_name
from resources.log_store import LogStoreResource

# Per-partition check history needs partitioned check specs, a preview feature in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

SEVERITY = {ERROR: dg.AssetCheckSeverity.ERROR, WARN: dg.AssetCheckSeverity.WARN}
COMPACTED_LOG = dg.AssetKey("compacted_log")


def last_cleaning(instance: dg.DagsterInstance, log: str) -> dict:
    """The partition's latest compacted_log materialization's record of its cleaning, or a Failure."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=COMPACTED_LOG, asset_partitions=[log]), limit=1).records
    meta = records[0].asset_materialization.metadata if records else {}
    if not all(k in meta for k in (BEFORE_VERSION, AFTER_VERSION, EVALUATED_AT_MS, "cleaned")):
        raise dg.Failure(description=f"no cleaning of {log} is recorded: materialize compacted_log for this "
                                     "partition first")
    return {"before": int(meta[BEFORE_VERSION].value), "after": int(meta[AFTER_VERSION].value),
            "now": int(meta[EVALUATED_AT_MS].value), "cleaned": bool(meta["cleaned"].value),
            "run": records[0].run_id}


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec(spec.name, asset=COMPACTED_LOG, blocking=spec.blocking, description=spec.description,
                             partitions_def=log_partitions) for spec in CHECK_SPECS],
    can_subset=True, name="compacted_log_checks",
    description="Verifies the partition's last cleaning against the checks' own model of SPEC §3-§6.")
def compacted_log_checks(context: dg.AssetCheckExecutionContext, log_store: LogStoreResource):
    """Run the selected checks on the cleaning the partition's latest materialization recorded."""
    log = context.partition_key
    try:
        parse_log_name(log, "partition key")
    except LogNameError as exc:
        raise dg.Failure(description=str(exc)) from None
    cleaning = last_cleaning(context.instance, log)
    selected = tuple(k.name for k in context.selected_asset_check_keys)
    try:
        outcomes = verify_versions(log_store.handle(log), log_store.config_for(log), cleaning["before"],
                                   cleaning["after"], cleaning["now"], cleaning["cleaned"], selected)
    except CompactionError as exc:   # e.g. a version gone: a later cleaning replaced this one
        raise dg.Failure(description=f"cannot verify the last cleaning of {log}: {exc}", metadata={"log": log}) from None
    severities = {spec.name: spec.severity for spec in CHECK_SPECS}
    for outcome in outcomes:
        yield dg.AssetCheckResult(
            check_name=outcome.name, asset_key=COMPACTED_LOG, passed=outcome.passed,
            severity=SEVERITY[severities[outcome.name]], description=outcome.description,
            metadata={**outcome.metadata, "log": log, "before_version": cleaning["before"],
                      "after_version": cleaning["after"], "cleaning_run": cleaning["run"]})
