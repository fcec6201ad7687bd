"""bench/landing.py's layouts beyond each connector's own record in each file format, and its library
contender (issue 59):

    aiven-csv         Aiven's CSV `key,value,offset,timestamp`: key and value base64 (the value the row's
                      canonical JSON text), an empty value cell a tombstone
    lenses64-jsonl    Lenses' JSON envelopes with `keyIsArray` / `valueIsArray` true: key and value base64
    debezium-jsonl    Debezium's raw change events (PostgreSQL's: op, before, after, source with lsn) as the
                      values of Aiven's JSON Lines records, keyed by `{"id": ...}`; `cdc.format debezium` with
                      `source.lsn` packed into the `dbz.version` header; a tombstone record is an `op` d event
    pyarrow:<layout>  not the product: pyarrow's reader of the layout's files (JSON, CSV; Parquet as is) and a
                      Parquet write of each, in a process of its own, over the same files (the issue's bound:
                      the product within 2 x of it)
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from pathlib import Path

TS0 = 1_700_000_000_000
TOPIC = "users"
DEBEZIUM = {
    "landing.format": "aiven",
    "cdc.format": "debezium",
    "compaction.strategy": "header",
    "compaction.strategy.header": "dbz.version",
    "cdc.version.fields": "source.lsn",
}
CONFIGS = {
    "aiven-csv": {"landing.format": "aiven"},
    "lenses64-jsonl": {"landing.format": "lenses"},
    "debezium-jsonl": DEBEZIUM,
}


def _b64(text: str | None) -> str | None:
    return None if text is None else base64.b64encode(text.encode()).decode()


def write_aiven_csv(fmt: str, folder: Path, first: int, rows: list) -> None:
    """`rows`: (offset, key, value canonical text or None, timestamp)."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"{_b64(k)},{_b64(v) or ''},{o},{t}\n" for o, k, v, t in rows)
    (folder / f"{TOPIC}-0-{first}.csv").write_text(lines)


def write_lenses64(fmt: str, folder: Path, first: int, rows: list) -> None:
    path = folder / TOPIC / "0"
    path.mkdir(parents=True, exist_ok=True)
    envelopes = [
        {
            "key": _b64(k),
            "value": _b64(v),
            "keyIsArray": True,
            "valueIsArray": True,
            "headers": {},
            "metadata": {"timestamp": t, "topic": TOPIC, "partition": 0, "offset": o},
        }
        for o, k, v, t in rows
    ]
    last = rows[-1][0]
    (path / f"{last:012d}_{TS0 + first}_{TS0 + last}.json").write_text("".join(json.dumps(e) + "\n" for e in envelopes))


def write_debezium(fmt: str, folder: Path, first: int, rows: list) -> None:
    """`rows`: (offset, key id, row dict or None, timestamp); a None row is the key's delete event."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for o, key_id, row, t in rows:
        last = {"id": key_id, "email": f"user{key_id}@example.com", "plan": "free", "n": o - 1}
        event = {
            "before": last if row is None or o % 3 else None,
            "after": None if row is None else {"id": key_id, **row},
            "op": "d" if row is None else ("u" if o % 3 else "c"),
            "ts_ms": t,
            "source": {"connector": "postgresql", "db": "app", "table": "users", "lsn": 10 * o, "txId": o // 7},
        }
        out.append(json.dumps({"key": {"id": key_id}, "value": event, "offset": o, "timestamp": t}) + "\n")
    (folder / f"{TOPIC}-0-{first}.jsonl").write_text("".join(out))


def library_once(landing: str) -> None:
    """In this process: each file of a landing folder read by pyarrow and written as Parquet; print the CPU."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    files = sorted(p for p in Path(landing).rglob("*") if p.is_file())
    records = 0
    started, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory(prefix="landing-pyarrow-") as out:
        for i, path in enumerate(files):
            if path.suffix == ".csv":
                table = pcsv.read_csv(path, read_options=pcsv.ReadOptions(autogenerate_column_names=True))
            elif path.suffix == ".parquet":
                table = pq.read_table(path)
            else:
                table = pj.read_json(path)
            records += table.num_rows
            empty = [n for n, t in zip(table.column_names, table.schema.types) if t == pa.struct([])]
            pq.write_table(table.drop_columns(empty), f"{out}/{i}.parquet")  # Parquet has no empty struct
    print(
        json.dumps(
            {"seconds": time.perf_counter() - started, "cpu_seconds": time.process_time() - cpu, "records": records}
        )
    )
