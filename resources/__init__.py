"""Dagster resources: the Spark session and the log store."""
