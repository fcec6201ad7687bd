"""What a batch run (defs/batches/jobs.py) records for one of its logs: the events of the log's history, in
order, or why the log failed, and whether a retry may help. A failure is an observation of the asset
with `batch_failure` in its metadata, which the alert sensor (defs/alerts.py) pages once for."""

from dataclasses import dataclass, field

import dagster as dg

from compaction_assets.checks.model import LogView
from compaction_assets.errors import transient

FAILURE_KEY = "batch_failure"  # metadata key of the observation that records a log's failure in a batch

# An event of a partition's history, as a batch yields it for the partition
BatchEvent = dg.AssetMaterialization | dg.AssetObservation | dg.AssetCheckEvaluation


@dataclass(frozen=True)
class AwaitingTable:
    """A log recorded up to its latest state's Parquet files, waiting for its topic's table commit: the
    latest_state metadata so far and the cleaned version the checks read (the table check's model)."""

    state_metadata: dict
    after: LogView | None = None


@dataclass
class LogOutcome:
    """One log's share of a batch: the events of its history, in order, or why it failed."""

    log: str
    events: list[BatchEvent] = field(default_factory=list)
    failure: str | None = None
    transient: bool = False  # an engine fault or a held lease: a retry may succeed
    awaiting: AwaitingTable | None = None  # its latest_state waits for its topic's table commit
    reported: bool = False  # its failure is a fault another run reported (it marked the log): no alert


def failed_outcome(
    log: str, asset: str, reason: str, transient: bool = False, marked: bool = False, reported: bool = False
) -> LogOutcome:
    """A failure, recorded on the partition (the alert sensor pages once per such observation); none for a
    transient one (retried) or one another run reported first (`reported`: it marked the log)."""
    events: list[BatchEvent] = [] if transient or reported else [failure_observation(log, asset, reason, marked)]
    return LogOutcome(log, events, failure=reason, transient=transient, reported=reported)


def failure_observation(log: str, asset: str, reason: str, marked: bool) -> dg.AssetObservation:
    """The record of a log's failure that the alert sensor pages once for (`marked`: the log was marked
    uncleanable for it)."""
    return dg.AssetObservation(
        asset_key=asset, partition=log, metadata={FAILURE_KEY: reason, "observed_uncleanable": marked}
    )


def is_transient(exc: BaseException) -> bool:
    """True for a failure a retry may not meet again: an engine fault, a lease another run holds, a store
    that did not answer (errors.transient)."""
    return transient(exc)
