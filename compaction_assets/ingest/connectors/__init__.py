"""Landing what real connectors write: Confluent, Aiven and Lenses S3 sinks, and Debezium change events.

Modules: `layouts` (finding each topic-partition's landed files), `registry` (each `landing.format`'s
connector layout: `native`, `confluent`, `aiven`, `lenses`, each a `connector.Connector` saying how its files
are grouped and ordered into units and how their records are shaped), `readers` (file formats to rows),
`shapes` (each connector's record shape to key/value/offset/..., row by row), `columns` (a unit's records as
Arrow columns) and `parquet_columns` (Parquet files shaped column by column), `offsets` (Confluent's offsets
and tombstone interleaving) and `stream` (a Confluent group streamed), `debezium` (CDC envelopes and
versions), `canonical` (structured keys and values as canonical JSON, and the value schema kept per log) and
`ingest` (one partition's pending files to appendable batches). Nothing here imports dagster or cleaning.
"""
