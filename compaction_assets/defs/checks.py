"""The four asset checks of `compacted_log`, per partition (names and severities: checks/specs.py).

They verify the last cleaning recorded in the partition's latest materialization (the manifest versions
it read and wrote, and its time), so they run after the cleaning in the same job and can be re-run from
the UI (asset `compacted_log` -> Checks -> Execute, for a partition) without cleaning again. The
versions stay available until the next cleaning replaces the pin the asset set on them.

And the check of `latest_state` when tables are on: the partition's rows of its topic's table against the
checks' model of the log version the table reflects (defs/table/table.py compares them,
defs/history/history.py records).
"""

import warnings

import dagster as dg

from compaction_assets.checks.specs import CHECK_SPECS
from compaction_assets.defs.history.history import COMPACTED_LOG, SEVERITY, Cleaning, check_records, table_check_record
from compaction_assets.defs.history.recorded import recorded_cleaning
from compaction_assets.defs.partitions import log_partitions
from compaction_assets.defs.table.table import LATEST_STATE, TABLE_CHECK
from compaction_assets.errors import CompactionError, LogNameError
from compaction_assets.store.names import parse_log_name
from resources.log_store import LogStoreResource

# Per-partition check history needs partitioned check specs, a preview feature in Dagster 1.13.
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

__all__ = ["COMPACTED_LOG", "SEVERITY", "compacted_log_checks", "last_cleaning", "table_matches_latest_state"]


def last_cleaning(instance: dg.DagsterInstance, log: str) -> Cleaning:
    """The partition's latest compacted_log materialization's record of its cleaning, or a Failure."""
    cleaning = recorded_cleaning(instance, log)
    if cleaning is None:
        raise dg.Failure(
            description=f"no cleaning of {log} is recorded: materialize compacted_log for this partition first"
        )
    return cleaning


@dg.multi_asset_check(
    specs=[
        dg.AssetCheckSpec(
            spec.name,
            asset=COMPACTED_LOG,
            blocking=spec.blocking,
            description=spec.description,
            partitions_def=log_partitions,
        )
        for spec in CHECK_SPECS
    ],
    can_subset=True,
    name="compacted_log_checks",
    description="Verifies the partition's last cleaning against the checks' own model of SPEC §3-§6.",
)
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
        records = check_records(log_store, log, cleaning, selected)
    except CompactionError as exc:  # e.g. a version gone: a later cleaning replaced this one
        raise dg.Failure(
            description=f"cannot verify the last cleaning of {log}: {exc}", metadata={"log": log}
        ) from None
    for record in records:
        yield record.result()


@dg.asset_check(
    asset=LATEST_STATE,
    name=TABLE_CHECK,
    blocking=True,
    partitions_def=log_partitions,
    description="The topic's table holds, for this partition, exactly the checks' own model of the "
    "latest state of the log version its current snapshot reflects.",
)
def table_matches_latest_state(context: dg.AssetCheckExecutionContext, log_store: LogStoreResource):
    """Compare the partition's rows of its topic's table with the model's latest state of that version."""
    log = context.partition_key
    try:
        record = table_check_record(log_store, log)
    except CompactionError as exc:
        raise dg.Failure(description=f"cannot compare the table of {log}: {exc}", metadata={"log": log}) from None
    return record.result()
