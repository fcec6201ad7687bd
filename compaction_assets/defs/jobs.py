"""Jobs the sensors start: ingestion, and cleaning (plan, clean with checks, latest state)."""

import dagster as dg

ingest_job = dg.define_asset_job("ingest_job", selection=dg.AssetSelection.assets("raw_segments"))
compaction_job = dg.define_asset_job(
    "compaction_job",
    selection=dg.AssetSelection.assets("cleanable_range", "compacted_log", "latest_state")
    | dg.AssetSelection.checks_for_assets("compacted_log"))
