"""The latest state of each topic as an Iceberg table, following its logs: committed after every change a log
commits (follow.py), its lag behind them read from the snapshot summary (lag.py).

One table per topic (`<namespace>.<topic>`, see `catalog.table_name`), one Iceberg partition per log, rows
identified by (partition, key). catalog.py finds the catalog, schema.py the columns, commit.py commits
logs' changes as one snapshot (snapshot.py writes it: change.py finds what changed, delta.py writes the
position deletes, summary.py records the logs' marks), group.py groups a process's concurrent commits per
topic, follow.py commits the logs a change touched (nothing when already reflected), lag.py reads how far a
table is behind, rewrite.py rewrites buckets whose deletes pile up, expiry.py expires old snapshots and their
files, read.py reads and lists snapshots, feed.py tells what changed between two of them (a changes feed).
iceberg_internals.py is the only module using pyiceberg's private parts. Nothing here imports Dagster.

The public API for code downstream: `open_table` (a topic's table), `changes` (a changes feed: the keys
upserted and deleted between two snapshots, docs/table.md "A changes feed").
"""

from compaction_assets.table.feed import Changes, changes
from compaction_assets.table.read import open_table

__all__ = ["Changes", "changes", "open_table"]
