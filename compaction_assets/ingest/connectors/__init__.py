"""Landing what real connectors write: Confluent, Aiven and Lenses S3 sinks, and Debezium change events.

Modules: `layouts` (finding each topic-partition's landed files), `registry` (each `landing.format`'s
connector layout: `native`, `confluent`, `aiven`, `lenses`, each a `connector.Connector` saying how its files
are grouped and ordered into units and how their records are shaped), `offsets` (Confluent's offsets and
tombstone interleaving) and `stream` (a Confluent group streamed), `debezium` (CDC envelopes and versions;
`debezium_columns` a column of them at once), `ingest` (one partition's pending files to appendable
batches), and `shaping/`: each connector's record shape to key/value/offset/... row by row (`shapes`), or
column by column (`columns`, `parquet_columns`, `json_rows`, `json_columns`, `csv_columns`). The file
formats read are `ingest/formats/`'s. Nothing here imports dagster or cleaning.
"""
