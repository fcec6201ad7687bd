"""The latest state of each topic as an Iceberg table, following its logs: committed after every change a log
commits (follow.py), its lag behind them read from the snapshot summary (reading/lag.py).

One table per topic (`<namespace>.<topic>`, see `catalog.table_name`), one Iceberg partition per log, rows
identified by (partition, key). Here: catalog.py finds the catalog, schema.py the columns, summary.py what a
snapshot records of the logs it reflects, iceberg_internals.py is the only module using pyiceberg's private
parts; follow.py commits the logs a change touched (nothing when already reflected), lifecycle.py drops or
rebuilds a table, topic_delete.py removes a topic from the store. Two sub-packages:

- commit/: a log's change committed as one snapshot, exactly once (commit.py; snapshot.py, change.py,
  tail.py, delta.py write it; group.py groups a process's concurrent commits per topic), and the table kept
  lean after it (rewrite.py rewrites buckets whose deletes pile up, expiry.py expires old snapshots).
- reading/: the table read back: snapshots and time travel (read.py), a changes feed between two of them
  (feed.py), each log's lag behind its table (lag.py), where a key's values are still reachable (reach.py).

Nothing here imports Dagster.

The public API for code downstream: `open_table` (a topic's table), `changes` (a changes feed: the keys
upserted and deleted between two snapshots, docs/table.md "A changes feed").
"""

from compaction_assets.table.reading.feed import Changes, changes
from compaction_assets.table.reading.read import open_table

__all__ = ["Changes", "changes", "open_table"]
