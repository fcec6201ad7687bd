"""Kafka-grade log compaction for logs kept in files, on Spark (engine), with Dagster definitions."""
