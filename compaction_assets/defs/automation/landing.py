"""The landing backlog in Dagster: the discovery sensor observes each log's backlog (files and bytes pending,
how long the oldest has waited, the files set aside) as an observation of its raw_segments partition, so
that the partition's page charts it between ingestions and a log held up by a bad file shows it.

An observation is recorded when a log's backlog changes (a file lands, is ingested, is set aside or
released), not at every tick (every 5 s): the sensor's cursor keeps each log's last observed backlog
(its fingerprint), and a log whose backlog emptied is observed once more, at zero, then forgotten.
"""

from __future__ import annotations

import json

import dagster as dg

from compaction_assets.ingest.backlog import LandingBacklog

RAW_SEGMENTS = dg.AssetKey("raw_segments")


def backlog_metadata(backlog: LandingBacklog) -> dict:
    """A log's backlog as raw_segments' observation holds it (every key `landing_*`; 0 for no age)."""
    return {
        "landing_pending_files": len(backlog.pending),
        "landing_pending_bytes": backlog.pending_bytes,
        "landing_oldest_pending_age_ms": backlog.oldest_pending_age_ms or 0,
        "landing_files_set_aside": len(backlog.set_aside),
        "landing_set_aside": dg.MetadataValue.json(
            [{"file": e.file, "reason": e.reason, "by": e.by, "at_ms": e.at_ms} for e in backlog.set_aside[:50]]
        ),
    }


def _empty(backlog: LandingBacklog) -> bool:
    return not backlog.pending and not backlog.set_aside


def backlog_observations(
    backlogs: list[LandingBacklog], cursor: str | None, unseen: set[str]
) -> tuple[list[dg.AssetObservation], str]:
    """The observations of the backlogs that changed since the cursor's, and the next cursor. `unseen`: the
    logs whose backlog this tick did not read (a batch holds them): their entries are kept as they are."""
    last: dict[str, str] = json.loads(cursor) if cursor else {}
    seen = {b.log: b for b in backlogs}
    events = []
    for log, backlog in seen.items():
        if last.get(log) != backlog.fingerprint and not (_empty(backlog) and log not in last):
            events.append(
                dg.AssetObservation(asset_key=RAW_SEGMENTS, partition=log, metadata=backlog_metadata(backlog))
            )
    kept = {log: fp for log, fp in last.items() if log in unseen}
    kept.update({log: b.fingerprint for log, b in seen.items() if not _empty(b)})
    return events, json.dumps(kept, sort_keys=True, separators=(",", ":"))
