"""The topics' tables in Dagster: the `latest_state` asset's commit and comparison (table.py), and the
tables' freshness check and catch-up sensor (freshness.py).
"""
