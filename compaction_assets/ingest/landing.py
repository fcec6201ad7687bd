"""Reading input files (Parquet, JSON Lines or Avro with key, value, timestamp, optional headers and offset).

Avro is what Kafka Connect's storage sinks most often write (`<topic>/partition=<p>/<topic>+<p>+<offset>.avro`):
one record per Kafka record, with `key` and `value` as bytes or string (null value = tombstone), `timestamp`
(long, ms), optional `offset` (long) and `headers` (array of {key or name: string, value: bytes, string or
null}). A refused record is named by the file and its record number (from 1).

JSON Lines carry keys and values as UTF-8 strings; bytes that are not UTF-8 go in `key_b64` / `value_b64`
(base64) instead. Header values are strings, integers (8-byte big-endian), null, or {"b64": "..."}.
Every error names the file and the line.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.report import IngestReport
from compaction_assets.log.read_ahead import ReadAhead
from compaction_assets.segments.records import INT64_MAX, INT64_MIN, coerce_table, decode_base64, records_to_table

if TYPE_CHECKING:
    from compaction_assets.log.writer import AppendResult

FORMATS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".avro": "avro"}


def file_format(path: str | Path) -> str:
    """The landing format of a file by its extension (parquet or jsonl), or None."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise InvalidInputError(f"{path}: unsupported file type (expected .parquet, .jsonl, .json, .ndjson or .avro)")
    return fmt


def _json_record(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    allowed = {"key", "value", "key_b64", "value_b64", "timestamp", "headers", "offset"}
    unknown = set(obj) - allowed
    if unknown:
        raise InvalidInputError(f"{where}: unknown field(s) {sorted(unknown)}")
    rec: dict[str, Any] = {}
    for name in ("key", "value"):
        if f"{name}_b64" in obj:
            if name in obj:
                raise InvalidInputError(f"{where}: both {name!r} and '{name}_b64' given")
            raw = obj[f"{name}_b64"]
            rec[name] = None if raw is None else decode_base64(raw, f"{where}: {name}_b64")
        elif name in obj:
            val = obj[name]
            if val is not None and not isinstance(val, str):
                raise InvalidInputError(f"{where}: {name} must be a string or null, got {type(val).__name__}")
            rec[name] = val
        elif name == "key":
            raise InvalidInputError(f"{where}: missing required field 'key'")
        else:
            raise InvalidInputError(f"{where}: missing required field 'value' (null for a tombstone)")
    for name in ("timestamp", "offset"):
        val = obj.get(name)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
            raise InvalidInputError(f"{where}: {name} must be an integer, got {val!r}")
        if val is not None and not INT64_MIN <= val <= INT64_MAX:
            raise InvalidInputError(f"{where}: {name} {val} does not fit in a signed 64-bit integer")
        if val is not None:
            rec[name] = val
    headers = obj.get("headers")
    if headers is not None:
        if isinstance(headers, dict):
            headers = list(headers.items())
        if not isinstance(headers, list):
            raise InvalidInputError(f"{where}: headers must be a list of [name, value] pairs")
        fixed = []
        for h in headers:
            if not (isinstance(h, (list, tuple)) and len(h) == 2):
                raise InvalidInputError(f"{where}: malformed header {h!r} (expected [name, value])")
            name, val = h
            if not isinstance(name, str):
                raise InvalidInputError(f"{where}: header name {name!r} is not a string")
            if isinstance(val, dict):
                val = decode_base64(val.get("b64"), f"{where}: header {name!r}")
            elif isinstance(val, bool) or not (val is None or isinstance(val, (str, int))):
                raise InvalidInputError(
                    f"{where}: header {name!r} value must be a string, an integer "
                    f'(8 bytes), null or {{"b64": ...}}, got {type(val).__name__}'
                )
            elif isinstance(val, int) and not INT64_MIN <= val <= INT64_MAX:
                raise InvalidInputError(f"{where}: header {name!r} value {val} does not fit in 8 bytes")
            fixed.append([name, val])
        rec["headers"] = fixed
    return rec


def read_jsonl(path: str | Path, lines: list[int] | None = None) -> pa.Table:
    """A JSON Lines file as a table; `lines`, when given, receives the line number of each record."""
    records = []
    try:
        with open(path, "rb") as fh:
            for n, raw in enumerate(fh, 1):
                where = f"{path}: line {n}"
                if not raw.strip():
                    continue
                try:
                    # without the line's end: an error at the end of the line is at its true column
                    obj = json.loads(raw.rstrip(b"\r\n").decode("utf-8"))
                except UnicodeDecodeError:
                    raise InvalidInputError(f"{where}: not UTF-8 (use key_b64/value_b64 for raw bytes)") from None
                except json.JSONDecodeError as exc:
                    raise InvalidInputError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
                except RecursionError:
                    raise InvalidInputError(f"{where}: JSON nested too deeply") from None
                records.append(_json_record(obj, where))
                if lines is not None:
                    lines.append(n)
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return records_to_table(records, str(path))


def read_parquet(path: str | Path) -> pa.Table:
    """Read a landed Parquet file, naming the file in any error."""
    try:
        table = pq.read_table(str(path))
    except (OSError, pa.ArrowException) as exc:
        raise InvalidInputError(f"{path}: not a readable Parquet file ({exc})") from None
    return coerce_table(table, str(path))


def _avro_bytes(value: Any, where: str, name: str) -> bytes | str | None:
    if value is None or isinstance(value, (bytes, str)):
        return value
    raise InvalidInputError(f"{where}: {name} must be bytes, a string or null, got {type(value).__name__}")


def _avro_record(obj: Any, where: str) -> dict:
    if not isinstance(obj, dict):
        raise InvalidInputError(f"{where}: expected an Avro record, got {type(obj).__name__}")
    unknown = set(obj) - {"key", "value", "timestamp", "headers", "offset"}
    if unknown:
        raise InvalidInputError(f"{where}: unknown field(s) {sorted(unknown)}")
    for name in ("key", "value"):
        if name not in obj:
            raise InvalidInputError(f"{where}: missing required field {name!r}")
    rec: dict[str, Any] = {
        "key": _avro_bytes(obj["key"], where, "key"),
        "value": _avro_bytes(obj["value"], where, "value"),
    }
    for name in ("timestamp", "offset"):
        val = obj.get(name)
        if val is not None and (not isinstance(val, int) or isinstance(val, bool)):
            raise InvalidInputError(f"{where}: {name} must be a long, got {val!r}")
        if val is not None:
            rec[name] = val
    headers = obj.get("headers")
    if headers is not None:
        if not isinstance(headers, list):
            raise InvalidInputError(f"{where}: headers must be an array of {{key, value}} records")
        fixed = []
        for h in headers:
            name = h.get("key", h.get("name")) if isinstance(h, dict) else None
            if not isinstance(name, str):
                raise InvalidInputError(f"{where}: malformed header {h!r} (expected {{key: string, value: bytes}})")
            fixed.append([name, _avro_bytes(h.get("value"), where, f"header {name!r} value")])
        rec["headers"] = fixed
    return rec


def read_avro(path: str | Path, numbers: list[int] | None = None) -> pa.Table:
    """An Avro container file as a table, read whole before anything is appended (all or nothing);
    `numbers`, when given, receives each record's number (from 1). Errors name the file and record."""
    import fastavro  # only landing folders with .avro files need it

    records = []
    n = 0
    try:
        with open(path, "rb") as fh:
            try:
                reader = fastavro.reader(fh)
            except Exception as exc:  # fastavro raises several types for a bad header
                raise InvalidInputError(f"{path}: not a readable Avro file ({_first_line(exc)})") from None
            while True:
                try:
                    obj = next(reader)
                except StopIteration:
                    break
                except Exception as exc:  # a corrupt block or a truncated file
                    raise InvalidInputError(
                        f"{path}: record {n + 1}: corrupt Avro data ({type(exc).__name__}: {_first_line(exc)})"
                    ) from None
                n += 1
                records.append(_avro_record(obj, f"{path}: record {n}"))
                if numbers is not None:
                    numbers.append(n)
    except OSError as exc:
        raise InvalidInputError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return records_to_table(records, str(path))


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def read_input_file(path: str | Path, lines: list[int] | None = None) -> pa.Table:
    """One input file as an INPUT_SCHEMA table; refuses malformed content with file and line/offset.
    For JSON Lines (Avro), `lines` (when given) receives each record's line (record) number."""
    fmt = file_format(path)
    if fmt == "parquet":
        return read_parquet(path)
    return read_avro(path, lines) if fmt == "avro" else read_jsonl(path, lines)


def append_file(handle, config, path: str | Path, **kw):
    """Append one input file (all or nothing). A refused record is named by the file and its line
    (JSON Lines) or row (Parquet, counting from 1), besides its offset."""
    from compaction_assets.log import writer

    lines: list[int] = []
    table = read_input_file(path, lines)
    try:
        return writer.append(handle, config, table, source=str(path), **kw)
    except InvalidInputError as exc:
        prefix = f"{path}: "
        msg = str(exc)
        if exc.row is None or not msg.startswith(prefix):
            raise
        unit = "record" if file_format(path) == "avro" else "line"
        where = f"{unit} {lines[exc.row]}" if lines else f"row {exc.row + 1}"
        raise InvalidInputError(prefix + where + ": " + msg[len(prefix) :], row=exc.row) from None


@dataclass(frozen=True)
class FilesAppended:
    """What one append of several files did: each file's records, and the one commit's result."""

    files: tuple[tuple[str, int], ...]  # (path, records read from it), in the order given
    result: AppendResult  # the single commit's


def append_files(handle, config, paths: list[str | Path], **kw) -> FilesAppended:
    """Append several input files in one commit: every file is read and validated before anything is
    written, so either all of them are appended or none (a refused record names its file and line)."""
    from compaction_assets.log import writer

    if len(paths) == 1:
        res = append_file(handle, config, paths[0], **kw)
        return FilesAppended(((str(paths[0]), res.records + res.invalid_records),), res)
    tables, lines, starts = [], [], [0]
    for path in paths:
        numbers: list[int] = []
        tables.append(read_input_file(path, numbers))
        lines.append(numbers)
        starts.append(starts[-1] + len(tables[-1]))
    source = "append of " + ", ".join(str(p) for p in paths)
    try:
        res = writer.append(handle, config, pa.concat_tables(tables), source=source, **kw)
    except InvalidInputError as exc:
        if exc.row is None or not str(exc).startswith(source + ": "):
            raise
        i = bisect.bisect_right(starts, exc.row) - 1
        row, path = exc.row - starts[i], paths[i]
        unit = "record" if file_format(path) == "avro" else "line"
        where = f"{unit} {lines[i][row]}" if lines[i] else f"row {row + 1}"
        raise InvalidInputError(f"{path}: {where}: {str(exc)[len(source) + 2 :]}", row=exc.row) from None
    return FilesAppended(tuple((str(p), len(t)) for p, t in zip(paths, tables)), res)


# --- the landing area: <landing>/<topic>/partition=<p>/<files> (Kafka Connect sink layout), and the layouts
# of Confluent's, Aiven's and Lenses' S3 sinks (compaction_assets/log/connectors), on a disk or an object store.


def landing_logs(landing: str | Path) -> tuple[dict[str, Any], list[str]]:
    """Logs found in the landing area ({log name: its PartitionSource}) and the folders refused for their names.
    The landing area is a local folder or an object-store URI (s3://bucket/prefix)."""
    from compaction_assets.ingest.connectors.layouts import discover

    return discover(landing)


def _connector_named(name: str) -> bool:
    from compaction_assets.ingest.connectors.layouts import AIVEN_NAME, CONFLUENT_NAME, LENSES_NAME

    base = name.rsplit("/", 1)[-1]
    return any(p.match(base) for p in (CONFLUENT_NAME, AIVEN_NAME, LENSES_NAME))


def pending_files(folder: Any, ingested: set[str] | tuple[str, ...]) -> list[Any]:
    """Input files of a landing folder (or PartitionSource) not yet ingested, in name order (sinks name files
    by offset); each has a `.name`."""
    from compaction_assets.ingest.connectors.layouts import PartitionSource, recorded_names

    done = recorded_names(ingested)
    if isinstance(folder, PartitionSource):
        return [
            f
            for f in folder.files
            if f.name not in done and (f.name.lower().endswith(tuple(FORMATS)) or _connector_named(f.name))
        ]
    folder = Path(folder)
    return [
        p
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith((".", "_")) and p.suffix.lower() in FORMATS and p.name not in done
    ]


def _source(folder: Any, log_name: str):
    from compaction_assets.ingest.connectors.layouts import PartitionSource, local_source

    return folder if isinstance(folder, PartitionSource) else local_source(folder, log_name)


def ingest(handle, config, folder: Any, *, drop_invalid: bool = False, progress=None) -> IngestReport:
    """Append every pending file of a landing folder (a path, or a PartitionSource from `landing_logs`), in
    order, each all-or-nothing and at most once, read as the topic's `landing.format` says.

    Stops at the first file that fails validation (later files would otherwise land before it) and
    raises InvalidInputError naming the file and the reason; files before it stay ingested.
    """
    from compaction_assets.topics.landing_settings import LandingFormat

    src = _source(folder, handle.name)
    if config.landing.format is LandingFormat.NATIVE:
        return _ingest_native(handle, config, src, drop_invalid, progress)
    return _ingest_connector(handle, config, src, drop_invalid, progress)


def _ingest_native(handle, config, src, drop_invalid: bool, progress) -> IngestReport:
    """Today's record shape, one file at a time (a file on an object store is read through a local copy)."""
    import tempfile

    from compaction_assets.ingest.connectors.layouts import NATIVE_SUFFIXES, TOMBSTONE_DIR, recorded_names

    done = recorded_names(handle.manifest().ingested)
    files = [
        f
        for f in src.files
        if f.name not in done
        and not f.name.startswith(TOMBSTONE_DIR + "/")
        and Path(f.name).suffix.lower() in FORMATS
        and f.name.lower().endswith(NATIVE_SUFFIXES)
    ]
    appended, records, dropped = [], 0, 0
    for n, f in enumerate(files, 1):
        if progress:
            progress(f"{handle.name}: ingesting {f.name} ({n}/{len(files)})")
        if src.storage.local:
            res = append_file(handle, config, f.path, drop_invalid=drop_invalid, ingest_name=f.name)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                local = Path(tmp) / f.name
                local.write_bytes(src.storage.read_bytes(f.path))
                try:
                    res = append_file(handle, config, local, drop_invalid=drop_invalid, ingest_name=f.name)
                except InvalidInputError as exc:
                    msg = str(exc).replace(str(local), src.storage.uri(f.path))
                    raise InvalidInputError(msg, row=exc.row) from None
        if res.already_ingested:
            continue
        appended.append(f.name)
        records += res.records
        dropped += res.invalid_records
    return IngestReport(tuple(appended), records, dropped)


def _ingest_connector(handle, config, src, drop_invalid: bool, progress) -> IngestReport:
    """A connector's layout (compaction_assets/log/connectors): each unit all or nothing, at most once."""
    from compaction_assets.ingest.connectors.ingest import append_batch, batches

    appended, records, dropped, from_mtime, inferred = [], 0, 0, 0, []
    # the next batch is read and shaped while this one is appended (its error is raised after this one)
    with ReadAhead(batches(src, config.landing, handle.manifest().ingested)) as pending:
        for n, batch in enumerate(pending, 1):
            if progress:
                progress(f"{handle.name}: ingesting {batch.name.split('|')[0]} (batch {n})")
            res = append_batch(handle, config, batch, drop_invalid)
            if res.already_ingested:
                continue
            appended += batch.name.split("|")
            records += res.records
            dropped += res.invalid_records
            from_mtime += batch.mtime_timestamps
            if batch.inferred_offsets:
                inferred.append(batch.name.split("|")[0])
    return IngestReport(
        tuple(appended),
        records,
        dropped,
        connector_layout=True,
        timestamps_from_mtime=from_mtime,
        offsets_inferred=tuple(inferred),
    )
