"""Landing what real connectors write: Confluent, Aiven and Lenses S3 sinks, and Debezium change events.

Modules: `settings` (the topic's landing keys), `layouts` (finding and ordering each connector's files),
`readers` (file formats to rows), `shapes` (each connector's record shape to key/value/offset/...),
`offsets` (Confluent's offsets and tombstone interleaving), `debezium` (CDC envelopes and versions),
`canonical` (structured keys and values as canonical JSON, and the value schema kept per log) and
`ingest` (one partition's pending files to appendable batches). Nothing here imports dagster or cleaning.
"""
