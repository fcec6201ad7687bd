"""Ingestion throughput by landing layout: each connector's layout against the native files of the same
file format, the same records, each ingestion in its own process (as `compaction ingest` runs).

    python -m bench.landing --records 5000000 --files 20 [--layouts a,b] [--repeats N] \
        [--work DIR [--reuse-files]] [--json FILE]

Records: `key` from a key space of records / 10 (a users table), `value` a user row (email, n, plan),
5% tombstones, timestamps 1 ms apart. Native files carry the value as its canonical JSON text (what a
connector layout stores for a structured value), so both sides append the same bytes. Layouts, each in
`jsonl`, `avro` and `parquet` (default: all twelve):

    native-<fmt>        today's `{key, value, timestamp, offset}` rows under `<topic>/partition=<p>/`
    aiven-<fmt>         `<topic>-<p>-<start>.<fmt>` with key, value, offset, timestamp (headers empty)
    confluent-<fmt>     value files + `.keys` files (`.json`, `.avro`, `.snappy.parquet`), offsets and
                        timestamps from InsertField, each file's tombstones in `tombstone/`
    lenses-<fmt>        envelopes under `<topic>/<p>/<last>_<min>_<max>.<ext>` (offset, timestamp in metadata)

and `aiven-csv`, `lenses64-jsonl` (base64 keys and values), `debezium-jsonl` (change events), and the
library contender `pyarrow:<layout>` (bench/landing_extra.py). `spark:<layout>` ingests the layout's files on
the Spark route (`ingest --spark`: read and shaped by Spark tasks of a local session, committed in order here);
its CPU seconds are the process tree's (the JVM and its Python workers).

Each layout's files are written once; then every round ingests every layout once into a fresh store, in
the order given (rounds interleaved, so that the machine's load drifts alike over the contenders). Prints
one line per ingestion (seconds, records a second, the 1-minute load average before and after, CPU seconds of
all its threads, ratio to the same round's native layout of the file format in seconds and in CPU time), then
per layout the median seconds, median CPU seconds, records per CPU second and the medians of its rounds'
ratios; --json writes both. CPU time is less
swayed than seconds by other processes' load (though not immune: they share the caches).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from bench import landing_extra

TOPIC = "users"
TS0 = 1_700_000_000_000
TOMBSTONE_EVERY = 20  # 5% of records delete their key
FORMATS = ("jsonl", "avro", "parquet")
LAYOUTS = tuple(f"{connector}-{fmt}" for connector in ("native", "aiven", "confluent", "lenses") for fmt in FORMATS) + (
    "aiven-csv",
    "lenses64-jsonl",
    "debezium-jsonl",
)
INSERT_FIELDS = {"landing.offset.field": "kafka_offset", "landing.timestamp.field": "kafka_ts"}
CONFIGS = {
    **{f"aiven-{fmt}": {"landing.format": "aiven"} for fmt in FORMATS},
    **{f"confluent-{fmt}": {"landing.format": "confluent", **INSERT_FIELDS} for fmt in FORMATS},
    **{f"lenses-{fmt}": {"landing.format": "lenses"} for fmt in FORMATS},
    **landing_extra.CONFIGS,
}


@dataclass(frozen=True)
class Result:
    """One layout's ingestion in one round, timed as a whole process and inside it."""

    layout: str
    round: int
    records: int
    process_seconds: float
    ingest_seconds: float
    records_per_second: float
    load_before: float  # the 1-minute load average as the process started and as it ended
    load_after: float
    cpu_seconds: float = 0.0  # the ingestion's CPU time, every thread: less swayed by others' load
    ratio_to_native: float | None = None  # to the native layout of the same file format, same round
    cpu_ratio_to_native: float | None = None


@dataclass(frozen=True)
class Summary:
    """A layout over the rounds: median seconds and the median of its rounds' ratios to native."""

    layout: str
    rounds: int
    median_seconds: float
    fastest_seconds: float
    median_cpu_seconds: float
    records_per_cpu_second: int
    median_ratio: float | None
    median_cpu_ratio: float | None
    load_low: float
    load_high: float


def rows(first: int, count: int, keys: int):
    """The records first..first+count-1: (offset, key, value dict or None, timestamp)."""
    for offset in range(first, first + count):
        key_id = (offset * 7919) % keys
        value = (
            None
            if offset % TOMBSTONE_EVERY == 7
            else {"email": f"user{key_id}@example.com", "plan": ("free", "pro", "team")[offset % 3], "n": offset}
        )
        yield offset, f"user-{key_id}", value, TS0 + offset


def canonical(value: dict | None) -> str | None:
    """A value as the canonical JSON text the connector layouts store (sorted keys, compact)."""
    return None if value is None else json.dumps(value, sort_keys=True, separators=(",", ":"))


VALUE_AVRO = {
    "type": "record",
    "name": "User",
    "fields": [{"name": "email", "type": "string"}, {"name": "n", "type": "long"}, {"name": "plan", "type": "string"}],
}


def _value_struct():
    import pyarrow as pa

    return pa.struct([("email", pa.string()), ("n", pa.int64()), ("plan", pa.string())])


def _write_file(path: Path, fmt: str, records: list, schema=None) -> None:
    """Records in one file of `fmt`: JSON lines, Avro with `schema` (fastavro's), Parquet with `schema` (Arrow's)."""
    import fastavro
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
    elif fmt == "avro":
        with open(path, "wb") as out:
            fastavro.writer(out, schema, records)
    else:
        pq.write_table(pa.Table.from_pylist(records, schema=schema), path)


def _write_native(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    import pyarrow as pa

    records = [
        {"offset": o, "key": k, "value": canonical(v), "timestamp": t} for o, k, v, t in rows(first, count, keys)
    ]
    avro = {
        "type": "record",
        "name": "Rec",
        "fields": [
            {"name": "offset", "type": "long"},
            {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", "string"]},
            {"name": "timestamp", "type": "long"},
        ],
    }
    arrow = pa.schema([("offset", pa.int64()), ("key", pa.string()), ("value", pa.string()), ("timestamp", pa.int64())])
    _write_file(folder / TOPIC / "partition=0" / f"{first:012d}.{fmt}", fmt, records, avro if fmt == "avro" else arrow)


def _write_aiven(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    import pyarrow as pa

    if fmt == "csv":
        landing_extra.write_aiven_csv(
            fmt, folder, first, [(o, k, canonical(v), t) for o, k, v, t in rows(first, count, keys)]
        )
        return

    records = [{"key": k, "value": v, "offset": o, "timestamp": t} for o, k, v, t in rows(first, count, keys)]
    if fmt != "jsonl":
        records = [{**r, "headers": {} if fmt == "avro" else []} for r in records]
    avro = {
        "type": "record",
        "name": "connector_records",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", VALUE_AVRO]},
            {"name": "offset", "type": "long"},
            {"name": "timestamp", "type": "long"},
            {"name": "headers", "type": ["null", {"type": "map", "values": ["null", "bytes"]}]},
        ],
    }
    arrow = pa.schema(
        [
            ("key", pa.string()),
            ("value", _value_struct()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("headers", pa.map_(pa.string(), pa.string())),
        ]
    )
    _write_file(folder / f"{TOPIC}-0-{first}.{fmt}", fmt, records, avro if fmt == "avro" else arrow)


def _write_confluent(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    import pyarrow as pa

    ext = {"jsonl": "json", "avro": "avro", "parquet": "snappy.parquet"}[fmt]
    key_records = (lambda ks: [{"key": k} for k in ks]) if fmt == "parquet" else (lambda ks: list(ks))
    key_schema = pa.schema([("key", pa.string())]) if fmt == "parquet" else "string"
    # the chunk's tombstones in one keys file under tombstone/ (rotated as the values are, in the sink's
    # format): their offsets are the ones the value files leave free
    dead = [(o, k) for o, k, v, _ in rows(first, count, keys) if v is None]
    _write_file(
        folder / TOPIC / "tombstone" / f"{TOPIC}+0+{dead[0][0]:010d}.keys.{ext}",
        fmt,
        key_records(k for _, k in dead),
        key_schema,
    )
    live = [(o, k, v, t) for o, k, v, t in rows(first, count, keys) if v is not None]
    base = folder / TOPIC / "partition=0" / f"{TOPIC}+0+{live[0][0]:010d}"
    avro = {
        **VALUE_AVRO,
        "fields": VALUE_AVRO["fields"]
        + [{"name": "kafka_offset", "type": "long"}, {"name": "kafka_ts", "type": "long"}],
    }
    arrow = pa.schema(list(_value_struct()) + [("kafka_offset", pa.int64()), ("kafka_ts", pa.int64())])
    _write_file(
        base.with_name(f"{base.name}.{ext}"),
        fmt,
        [{**v, "kafka_offset": o, "kafka_ts": t} for o, _, v, t in live],
        avro if fmt == "avro" else arrow,
    )
    _write_file(base.with_name(f"{base.name}.keys.{ext}"), fmt, key_records(k for _, k, _, _ in live), key_schema)


def _write_lenses(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    import pyarrow as pa

    records = [
        {
            "key": k,
            "value": v,
            "headers": {} if fmt != "parquet" else [],
            "metadata": {"timestamp": t, "topic": TOPIC, "partition": 0, "offset": o},
        }
        for o, k, v, t in rows(first, count, keys)
    ]
    meta = [("timestamp", "long"), ("topic", "string"), ("partition", "int"), ("offset", "long")]
    avro = {
        "type": "record",
        "name": "Envelope",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "value", "type": ["null", VALUE_AVRO], "default": None},
            {"name": "headers", "type": {"type": "map", "values": "string"}},
            {
                "name": "metadata",
                "type": {"type": "record", "name": "Meta", "fields": [{"name": n, "type": t} for n, t in meta]},
            },
        ],
    }
    arrow = pa.schema(
        [
            ("key", pa.string()),
            ("value", _value_struct()),
            ("headers", pa.map_(pa.string(), pa.string())),
            (
                "metadata",
                pa.struct(
                    [
                        ("timestamp", pa.int64()),
                        ("topic", pa.string()),
                        ("partition", pa.int32()),
                        ("offset", pa.int64()),
                    ]
                ),
            ),
        ]
    )
    last = first + count - 1
    ext = {"jsonl": "json", "avro": "avro", "parquet": "parquet"}[fmt]
    _write_file(
        folder / TOPIC / "0" / f"{last:012d}_{TS0 + first}_{TS0 + last}.{ext}",
        fmt,
        records,
        avro if fmt == "avro" else arrow,
    )


def write_layout(layout: str, folder: Path, records: int, files: int) -> None:
    """The layout's files for `records` records in `files` files."""
    per, keys = records // files, max(1, records // 10)
    for index in range(files):
        first = index * per
        connector, fmt = layout.split("-")
        WRITERS[connector](fmt, folder, first, per, keys)


def _write_lenses64(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    landing_extra.write_lenses64(
        fmt, folder, first, [(o, k, canonical(v), t) for o, k, v, t in rows(first, count, keys)]
    )


def _write_debezium(fmt: str, folder: Path, first: int, count: int, keys: int) -> None:
    records = [(o, int(k.split("-")[1]), v, t) for o, k, v, t in rows(first, count, keys)]
    landing_extra.write_debezium(fmt, folder, first, records)


WRITERS = {
    "native": _write_native,
    "aiven": _write_aiven,
    "confluent": _write_confluent,
    "lenses": _write_lenses,
    "lenses64": _write_lenses64,
    "debezium": _write_debezium,
}


def ingest_once(landing: str, store: str, layout: str) -> None:
    """In this process: configure the topic and ingest its landing folder; print the seconds as JSON. A
    `spark:` layout is ingested on the Spark route (a local session, started before the timing): its CPU
    seconds are those of the whole process tree (the JVM and its Python workers too)."""
    import pandas  # noqa: F401  pyarrow imports it at its first pa.array of a sequence: the native path's

    from compaction_assets.ingest.landing import ingest, landing_logs
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import build_config

    # imports bring it in before the timing, the connectors' shaping within it (0.3-1.5 s); import it first
    on_spark = layout.startswith("spark:")
    config = build_config(CONFIGS.get(layout.removeprefix("spark:"), {}))
    handle = LogStore(store, gc_grace_s=0).log(f"{TOPIC}-0")
    offer, session_seconds = _spark_offer() if on_spark else (None, 0.0)
    started, cpu = time.perf_counter(), _tree_cpu() if on_spark else time.process_time()
    report = ingest(handle, config, landing_logs(landing)[0][f"{TOPIC}-0"], spark=offer)
    print(
        json.dumps(
            {
                "seconds": time.perf_counter() - started,
                "cpu_seconds": (_tree_cpu() if on_spark else time.process_time()) - cpu,
                "records": report.records_appended,
                "path": report.path,
                "session_seconds": session_seconds,
            }
        )
    )


def _spark_offer():
    """A local Spark session (SPARK_MASTER, or local[*]) offered to the ingestion, asked to go to Spark; the
    seconds its start took (not in the ingestion's figures: a backfill's run pays it once)."""
    from compaction_assets.ingest.route import SparkOffer
    from compaction_assets.spark import get_spark

    started = time.perf_counter()
    session = get_spark()
    return SparkOffer(lambda: session, 0, requested=True), time.perf_counter() - started


def _tree_cpu() -> float:
    """CPU seconds of this process and every live descendant, with the children each has reaped (Spark's
    Python workers exit into their daemon's account): the Spark route's work is mostly in the JVM's
    children."""
    import psutil

    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def measure(layout: str, work: Path, round_number: int) -> Result:
    """Time the layout's ingestion of its written files into a fresh store, in a process of its own."""
    library = layout.startswith("pyarrow:")
    files = work / layout.removeprefix("pyarrow:").removeprefix("spark:")
    landing, store = files / "landing", files / "store"
    shutil.rmtree(store, ignore_errors=True)
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    ingest = ["--library", str(landing)] if library else ["--ingest", str(landing), "--store", str(store)]
    proc = subprocess.run(
        [sys.executable, "-m", "bench.landing", *ingest, "--layouts", layout], capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{layout}: ingestion failed: {proc.stderr.strip().splitlines()[-1:]}")
    inside = json.loads(proc.stdout.strip().splitlines()[-1])
    return Result(
        layout,
        round_number,
        inside["records"],
        round(wall, 2),
        round(inside["seconds"], 2),
        round(inside["records"] / inside["seconds"]),
        round(load_before, 1),
        round(os.getloadavg()[0], 1),
        round(inside["cpu_seconds"], 2),
    )


def with_ratio(result: Result, native: Result | None) -> Result:
    """The result with its ratio to the same round's native layout of its file format."""
    if native is None or result.layout.startswith("native"):
        return result
    return replace(
        result,
        ratio_to_native=round(result.ingest_seconds / native.ingest_seconds, 2),
        cpu_ratio_to_native=round(result.cpu_seconds / native.cpu_seconds, 2),
    )


def summarise(layout: str, results: list[Result]) -> Summary:
    """The layout's rounds as medians."""
    mine = [r for r in results if r.layout == layout]
    ratios = [r.ratio_to_native for r in mine if r.ratio_to_native is not None]
    cpu_ratios = [r.cpu_ratio_to_native for r in mine if r.cpu_ratio_to_native is not None]
    loads = [load for r in mine for load in (r.load_before, r.load_after)]
    return Summary(
        layout,
        len(mine),
        round(statistics.median(r.ingest_seconds for r in mine), 2),
        min(r.ingest_seconds for r in mine),
        round(statistics.median(r.cpu_seconds for r in mine), 2),
        round(statistics.median(r.records for r in mine) / statistics.median(r.cpu_seconds for r in mine)),
        round(statistics.median(ratios), 2) if ratios else None,
        round(statistics.median(cpu_ratios), 2) if cpu_ratios else None,
        min(loads),
        max(loads),
    )


def run_rounds(layouts: list[str], work: Path, repeats: int) -> list[Result]:
    """Every layout once per round, the rounds one after the other (interleaved, so load drifts alike)."""
    results: list[Result] = []
    for round_number in range(1, repeats + 1):
        done: dict[str, Result] = {}
        for layout in layouts:
            fmt = layout.split("-")[1]
            result = with_ratio(measure(layout, work, round_number), done.get(f"native-{fmt}"))
            done[layout] = result
            results.append(result)
            print(
                f"round {round_number} {layout:24s} {result.records:>9,} records  {result.ingest_seconds:7.2f} s in "
                f"process ({result.process_seconds:.2f} s process)  {result.records_per_second:>9,}/s  load "
                f"{result.load_before:.1f}-{result.load_after:.1f}  cpu {result.cpu_seconds:.2f} s"
                + (
                    f"  {result.ratio_to_native:.2f} x native {fmt} (cpu {result.cpu_ratio_to_native:.2f} x)"
                    if result.ratio_to_native
                    else ""
                ),
                flush=True,
            )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=5_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument(
        "--layouts",
        default=",".join(LAYOUTS),
        help="comma-separated; each connector's layout after the native one of its file format, for its ratio",
    )
    ap.add_argument("--repeats", type=int, default=1, help="rounds of every layout, interleaved")
    ap.add_argument("--work", help="where the files and stores go (default: a temporary folder)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--reuse-files",
        action="store_true",
        help="ingest the files an earlier run wrote under "
        "--work (same --records and --files) instead of writing them again",
    )
    ap.add_argument("--ingest", help=argparse.SUPPRESS)
    ap.add_argument("--library", help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ingest:
        ingest_once(args.ingest, args.store, args.layouts)
        return
    if args.library:
        landing_extra.library_once(args.library)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="landing-bench-"))
    layouts = args.layouts.split(",")
    for layout in {name.removeprefix("pyarrow:").removeprefix("spark:") for name in layouts}:
        if not (args.reuse_files and (work / layout / "landing").is_dir()):
            write_layout(layout, work / layout / "landing", args.records, args.files)
    results = run_rounds(layouts, work, args.repeats)
    summaries = [summarise(layout, results) for layout in layouts]
    print("layout                    rounds  median s  fastest s  cpu s  records/cpu s  median ratio  cpu ratio  load")
    for s in summaries:
        print(
            f"{s.layout:24s}  {s.rounds:6d}  {s.median_seconds:8.2f}  {s.fastest_seconds:9.2f}  "
            f"{s.median_cpu_seconds:5.2f}  {s.records_per_cpu_second:13,}  "
            + (f"{s.median_ratio:10.2f} x  {s.median_cpu_ratio:7.2f} x" if s.median_ratio is not None else " " * 23)
            + f"  {s.load_low:.1f}-{s.load_high:.1f}"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"runs": [asdict(r) for r in results], "summary": [asdict(s) for s in summaries]}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    main()
