"""The door's file formats: a landed file read into records or Arrow columns (Parquet, JSON Lines, JSON,
CSV, Avro), and keys and values made the bytes the log stores (canonical JSON)."""
