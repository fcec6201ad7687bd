"""Committing logs' changes to their topic's table, one Iceberg snapshot at a time, exactly once.

commit.py commits logs' changes as one snapshot (snapshot.py writes it: change.py finds what changed, or
tail.py takes it from the records a log appended, and delta.py writes the position deletes), then keeps the
table lean: rewrite.py rewrites buckets whose deletes pile up, expiry.py expires old snapshots and their
files. group.py groups a process's concurrent commits per topic.
"""
