"""Files written exactly as the connectors write them (Avro via fastavro, Parquet via pyarrow, JSON by hand)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq

# Confluent's HeaderRecordView: an array of {key: string, value: string} (Connect's AvroData names the
# nested struct ConnectDefault).
CONFLUENT_HEADERS_AVRO = {
    "type": "array",
    "items": {
        "type": "record",
        "name": "ConnectDefault",
        "namespace": "io.confluent.connect.avro",
        "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": ["null", "string"]}],
    },
}


def write_avro(path: Path, schema: Any, rows: list) -> Path:
    """An Avro container file (deflate, as Connect's AvroFormat defaults to)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        fastavro.writer(fh, fastavro.parse_schema(schema), rows, codec="deflate")
    return path


def write_parquet(path: Path, table: pa.Table) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path), compression="snappy")
    return path


def write_lines(path: Path, objs: list, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(o) + "\n" for o in objs).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def confluent_name(topic: str, p: int, start: int, view: str = "", ext: str = "avro") -> str:
    """Confluent's `<topic>+<p>+<start, 10 digits>[.keys|.headers].<ext>`."""
    return f"{topic}+{p}+{start:010d}{view}.{ext}"
