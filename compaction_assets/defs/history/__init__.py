"""A partition's history in Dagster: what its materializations and checks record (history.py), and what it
already holds, read back (recorded.py).
"""
