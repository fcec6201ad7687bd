"""A connector's records shaped to key, value, offset, timestamp and headers: by row (`shapes`), or column
by column from Parquet, JSON and Avro (`columns`, `parquet_columns`, `json_rows`, `json_columns`)."""
