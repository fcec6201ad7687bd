"""Ingestion throughput by landing layout: each connector's layout against the native files of the same
file format, the same records, each ingestion in its own process (as `compaction ingest` runs).

    python -m bench.landing --records 5000000 --files 20 [--layouts a,b] [--work DIR] [--json FILE]

Records: `key` from a key space of records / 10 (a users table), `value` a user row (email, plan, n),
5% tombstones, timestamps 1 ms apart. Native files carry the value as its canonical JSON text (what a
connector layout stores for a structured value), so both sides append the same bytes. Layouts:

    native-jsonl, native-avro, native-parquet              today's `{key, value, timestamp, offset}` rows
    aiven-jsonl, aiven-parquet                            `<topic>-<p>-<start>` with key, value, offset, timestamp
    confluent-avro, confluent-parquet                     value files + `.keys` files, offsets and
                                                          timestamps from InsertField, tombstones in `tombstone/`
    lenses-jsonl                                          envelopes under `<topic>/<p>/<last>_<min>_<max>.json`

Prints one line per layout (seconds, records a second, ratio to the native layout of the same file
format) and writes them as JSON with --json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

TOPIC = "users"
TS0 = 1_700_000_000_000
TOMBSTONE_EVERY = 20          # 5% of records delete their key
NATIVE_OF = {"jsonl": "native-jsonl", "avro": "native-avro", "parquet": "native-parquet"}
LAYOUTS = ("native-jsonl", "native-avro", "native-parquet", "aiven-jsonl", "aiven-parquet",
           "confluent-avro", "confluent-parquet", "lenses-jsonl")
CONFIGS = {
    "aiven-jsonl": {"landing.format": "aiven"}, "aiven-parquet": {"landing.format": "aiven"},
    "confluent-avro": {"landing.format": "confluent", "landing.offset.field": "kafka_offset",
                       "landing.timestamp.field": "kafka_ts"},
    "confluent-parquet": {"landing.format": "confluent", "landing.offset.field": "kafka_offset",
                          "landing.timestamp.field": "kafka_ts"},
    "lenses-jsonl": {"landing.format": "lenses"},
}


@dataclass(frozen=True)
class Result:
    """One layout's ingestion, timed as a whole process and inside it."""
    layout: str
    records: int
    process_seconds: float
    ingest_seconds: float
    records_per_second: float
    ratio_to_native: float | None = None


def rows(first: int, count: int, keys: int):
    """The records first..first+count-1: (offset, key, value dict or None, timestamp)."""
    for offset in range(first, first + count):
        key_id = (offset * 7919) % keys
        value = None if offset % TOMBSTONE_EVERY == 7 else {
            "email": f"user{key_id}@example.com", "plan": ("free", "pro", "team")[offset % 3], "n": offset}
        yield offset, f"user-{key_id}", value, TS0 + offset


def canonical(value: dict | None) -> str | None:
    """A value as the canonical JSON text the connector layouts store (sorted keys, compact)."""
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


def _write_native(layout: str, folder: Path, first: int, count: int, keys: int) -> None:
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    part = folder / TOPIC / "partition=0"
    part.mkdir(parents=True, exist_ok=True)
    records = [{"offset": o, "key": k, "value": canonical(v), "timestamp": t} for o, k, v, t in rows(first, count, keys)]
    name = part / f"{first:012d}"
    if layout == "native-jsonl":
        name.with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    elif layout == "native-parquet":
        pq.write_table(pa.Table.from_pylist(records), name.with_suffix(".parquet"))
    else:
        schema = {"type": "record", "name": "Rec", "fields": [
            {"name": "offset", "type": "long"}, {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", "string"]}, {"name": "timestamp", "type": "long"}]}
        with open(name.with_suffix(".avro"), "wb") as out:
            fastavro.writer(out, schema, records)


def _write_aiven(layout: str, folder: Path, first: int, count: int, keys: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    records = [{"key": k, "value": v, "offset": o, "timestamp": t} for o, k, v, t in rows(first, count, keys)]
    if layout == "aiven-jsonl":
        (folder / f"{TOPIC}-0-{first}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        return
    value_type = pa.struct([("email", pa.string()), ("n", pa.int64()), ("plan", pa.string())])
    schema = pa.schema([("key", pa.string()), ("value", value_type), ("offset", pa.int64()),
                        ("timestamp", pa.int64()), ("headers", pa.map_(pa.string(), pa.string()))])
    pq.write_table(pa.Table.from_pylist([{**r, "headers": []} for r in records], schema=schema),
                   folder / f"{TOPIC}-0-{first}.parquet")


def _write_confluent(layout: str, folder: Path, first: int, count: int, keys: int) -> None:
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    part, tomb = folder / TOPIC / "partition=0", folder / TOPIC / "tombstone"
    part.mkdir(parents=True, exist_ok=True)
    tomb.mkdir(parents=True, exist_ok=True)
    dead = [(o, k) for o, k, v, _ in rows(first, count, keys) if v is None]
    # the chunk's tombstones in one keys file under tombstone/ (rotated as the values are, in the sink's
    # format): their offsets are the ones the value files leave free
    tomb_name = tomb / f"{TOPIC}+0+{dead[0][0]:010d}.keys"
    if layout == "confluent-avro":
        with open(tomb_name.with_suffix(".keys.avro"), "wb") as out:
            fastavro.writer(out, "string", [k for _, k in dead])
    else:
        pq.write_table(pa.Table.from_pylist([{"key": k} for _, k in dead]), tomb_name.with_suffix(".keys.snappy.parquet"))
    live = [(o, k, v, t) for o, k, v, t in rows(first, count, keys) if v is not None]
    base = f"{TOPIC}+0+{live[0][0]:010d}"
    values = [{**v, "kafka_offset": o, "kafka_ts": t} for o, _, v, t in live]
    if layout == "confluent-avro":
        schema = {"type": "record", "name": "User", "fields": [
            {"name": "email", "type": "string"}, {"name": "plan", "type": "string"}, {"name": "n", "type": "long"},
            {"name": "kafka_offset", "type": "long"}, {"name": "kafka_ts", "type": "long"}]}
        with open(part / f"{base}.avro", "wb") as out:
            fastavro.writer(out, schema, values)
        with open(part / f"{base}.keys.avro", "wb") as out:
            fastavro.writer(out, "string", [k for _, k, _, _ in live])
    else:
        pq.write_table(pa.Table.from_pylist(values), part / f"{base}.snappy.parquet")
        pq.write_table(pa.Table.from_pylist([{"key": k} for _, k, _, _ in live]), part / f"{base}.keys.snappy.parquet")


def _write_lenses(folder: Path, first: int, count: int, keys: int) -> None:
    part = folder / TOPIC / "0"
    part.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"key": k, "value": v, "headers": {},
                         "metadata": {"timestamp": t, "topic": TOPIC, "partition": 0, "offset": o}})
             for o, k, v, t in rows(first, count, keys)]
    last = first + count - 1
    (part / f"{last:012d}_{TS0 + first}_{TS0 + last}.json").write_text("\n".join(lines) + "\n")


def write_layout(layout: str, folder: Path, records: int, files: int) -> None:
    """The layout's files for `records` records in `files` files."""
    per, keys = records // files, max(1, records // 10)
    for index in range(files):
        first = index * per
        if layout.startswith("native"):
            _write_native(layout, folder, first, per, keys)
        elif layout.startswith("aiven"):
            _write_aiven(layout, folder, first, per, keys)
        elif layout.startswith("confluent"):
            _write_confluent(layout, folder, first, per, keys)
        else:
            _write_lenses(folder, first, per, keys)


def ingest_once(landing: str, store: str, layout: str) -> None:
    """In this process: configure the topic and ingest its landing folder; print the seconds as JSON."""
    from compaction_assets.log.config import build_config
    from compaction_assets.log.landing import ingest, landing_logs
    from compaction_assets.log.store import LogStore

    import pandas  # noqa: F401  pyarrow imports it at its first pa.array of a sequence: the native path's
    # imports bring it in before the timing, the connectors' shaping within it (0.3-1.5 s); import it first
    config = build_config(CONFIGS.get(layout, {}))
    handle = LogStore(store, gc_grace_s=0).log(f"{TOPIC}-0")
    started = time.perf_counter()
    report = ingest(handle, config, landing_logs(landing)[0][f"{TOPIC}-0"])
    print(json.dumps({"seconds": time.perf_counter() - started, "records": report["records_appended"]}))


def measure(layout: str, work: Path, records: int, files: int) -> Result:
    """Write the layout's files, then time its ingestion in a process of its own."""
    landing = work / layout / "landing"
    write_layout(layout, landing, records, files)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "bench.landing", "--ingest", str(landing), "--store",
                           str(work / layout / "store"), "--layouts", layout], capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{layout}: ingestion failed: {proc.stderr.strip().splitlines()[-1:]}")
    inside = json.loads(proc.stdout.strip().splitlines()[-1])
    return Result(layout, inside["records"], round(wall, 2), round(inside["seconds"], 2),
                  round(inside["records"] / inside["seconds"]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--work", help="where the files and stores go (default: a temporary folder)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--ingest", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ingest:
        ingest_once(args.ingest, args.store, args.layouts)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="landing-bench-"))
    results: dict[str, Result] = {}
    for layout in args.layouts.split(","):
        result = measure(layout, work, args.records, args.files)
        fmt = layout.split("-")[1]
        native = results.get(NATIVE_OF.get(fmt, ""))
        if native is not None and not layout.startswith("native"):
            result = Result(**{**asdict(result), "ratio_to_native": round(result.ingest_seconds / native.ingest_seconds, 2)})
        results[layout] = result
        print(f"{layout:18s} {result.records:>9,} records  {result.ingest_seconds:7.2f} s in process "
              f"({result.process_seconds:.2f} s process)  {result.records_per_second:>9,}/s"
              + (f"  {result.ratio_to_native:.2f} x native {fmt}" if result.ratio_to_native else ""), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in results.values()], indent=2) + "\n")


if __name__ == "__main__":
    main()
