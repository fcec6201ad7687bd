"""Landing files into a log: input files appended (one, or several in one commit), and a landing folder's
pending files ingested, each at most once, as the topic's `landing.format` says.

A native landing folder (`<landing>/<topic>/partition=<p>/<files>`, Kafka Connect's sink layout) holds input
files in the record shape input_files.py reads, appended one file at a time; the layouts of Confluent's,
Aiven's and Lenses' S3 sinks are read, merged and appended by connectors/. A landing area is a local folder
or an object-store URI. A refused record is named by its file and its line (record, or row). A file set
aside (quarantine.py) is passed over by every ingestion of its log until it is released.
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from contextlib import AbstractContextManager, closing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from compaction_assets.errors import InvalidInputError
from compaction_assets.ingest.formats.file_formats import NATIVE_FILES, file_format
from compaction_assets.ingest.formats.input_files import read_input_file
from compaction_assets.ingest.quarantine import Quarantine
from compaction_assets.ingest.report import IngestReport
from compaction_assets.ingest.route import IN_PROCESS, IngestRoute, SparkOffer, ingest_route
from compaction_assets.log.read_ahead import ReadAhead
from compaction_assets.store.deleted_topics import DeletedTopics
from compaction_assets.store.fs import Storage
from compaction_assets.topics.landing_settings import FileFormat

if TYPE_CHECKING:
    from compaction_assets.log.writer import AppendResult


def append_file(handle, config, path: str | Path, **kw):
    """Append one input file (all or nothing). A refused record is named by the file and its line
    (JSON Lines) or row (Parquet, counting from 1), besides its offset."""
    lines: list[int] = []
    return append_table(handle, config, path, read_input_file(path, lines), lines, **kw)


def append_table(handle, config, path: str | Path, table: pa.Table, lines: list[int], **kw):
    """Append one input file's table, read from `path` with each row's line (record) number in `lines`."""
    from compaction_assets.log import writer

    try:
        return writer.append(handle, config, table, source=str(path), **kw)
    except InvalidInputError as exc:
        prefix = f"{path}: "
        msg = str(exc)
        if exc.row is None or not msg.startswith(prefix):
            raise
        unit = "record" if file_format(path, NATIVE_FILES) is FileFormat.AVRO else "line"
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
        unit = "record" if file_format(path, NATIVE_FILES) is FileFormat.AVRO else "line"
        where = f"{unit} {lines[i][row]}" if lines[i] else f"row {row + 1}"
        raise InvalidInputError(f"{path}: {where}: {str(exc)[len(source) + 2 :]}", row=exc.row) from None
    return FilesAppended(tuple((str(p), len(t)) for p, t in zip(paths, tables)), res)


# --- the landing area: <landing>/<topic>/partition=<p>/<files> (Kafka Connect sink layout), and the layouts
# of Confluent's, Aiven's and Lenses' S3 sinks (compaction_assets/log/connectors), on a disk or an object store.


def landing_logs(landing: str | Path, store: Storage | None = None) -> tuple[dict[str, Any], list[str]]:
    """Logs found in the landing area ({log name: its PartitionSource}) and the folders refused for their names.
    The landing area is a local folder or an object-store URI (s3://bucket/prefix). With the log `store`, the
    files a topic deletion set aside are left out, and a deleted topic's log left with none is not found."""
    from compaction_assets.ingest.connectors.layouts import discover

    found, refused = discover(landing)
    if store is None:
        return found, refused
    deleted = DeletedTopics(store).all()
    for log, src in list(found.items()):
        record = deleted.get(src.topic)
        if record is None:
            continue
        src.files = [f for f in src.files if not record.set_aside(log, f.name, f.mtime_ms)]
        if not src.files:
            del found[log]
    return found, refused


def pending_files(
    folder: Any, ingested: set[str] | tuple[str, ...], set_aside: frozenset[str] = frozenset()
) -> list[Any]:
    """Input files of a landing folder (or PartitionSource) not yet ingested nor set aside, in name order
    (sinks name files by offset); each has a `.name`."""
    from compaction_assets.ingest.connectors.layouts import PartitionSource, recorded_names
    from compaction_assets.ingest.connectors.registry import named_by_a_connector

    done = recorded_names(ingested) | set_aside
    if isinstance(folder, PartitionSource):
        return [
            f
            for f in folder.files
            if f.name not in done and (f.name.lower().endswith(NATIVE_FILES.suffixes) or named_by_a_connector(f.name))
        ]
    folder = Path(folder)
    return [
        p
        for p in sorted(folder.iterdir())
        if p.is_file()
        and not p.name.startswith((".", "_"))
        and p.suffix.lower() in NATIVE_FILES.formats
        and p.name not in done
    ]


def _source(folder: Any, log_name: str):
    from compaction_assets.ingest.connectors.layouts import PartitionSource, local_source

    return folder if isinstance(folder, PartitionSource) else local_source(folder, log_name)


def landed_file(folder: Any, log_name: str, file: str) -> Any:
    """The landed file of a log named `file`: its name as ingestion records it, its path, or its URI (as
    errors name it); None when the log has no such file."""
    src = _source(folder, log_name)
    local = os.path.abspath(file) if src.storage.local else None
    return next((f for f in src.files if file in (f.name, f.path, src.uri(f.path)) or f.path == local), None)


def unit_names(folder: Any, log_name: str, config, name: str) -> tuple[str, ...]:
    """The names of the files ingested as one unit with the file `name` (itself first): a Confluent value
    file's keys and headers; the file alone for any other layout, or when the layout refuses the folder."""
    from compaction_assets.ingest.connectors.registry import connector_for

    try:
        units = connector_for(config.landing.format).units(_source(folder, log_name))
    except InvalidInputError:  # a file the layout refuses is its own unit
        return (name,)
    names = next((tuple(f.name for f in u.files) for u in units if name in (f.name for f in u.files)), ())
    return (name, *(n for n in names if n != name))


def _without(src: Any, set_aside: frozenset[str]) -> tuple[Any, tuple[str, ...]]:
    """The source without the files set aside, and the names of those it held."""
    if not set_aside:
        return src, ()
    held = tuple(f.name for f in src.files if f.name in set_aside)
    return dataclasses.replace(src, files=[f for f in src.files if f.name not in set_aside]), held


def ingest(
    handle, config, folder: Any, *, drop_invalid: bool = False, progress=None, spark: SparkOffer | None = None
) -> IngestReport:
    """Append every pending file of a landing folder (a path, or a PartitionSource from `landing_logs`), in
    order, each all-or-nothing and at most once, read as the topic's `landing.format` says.

    Stops at the first file that fails validation (later files would otherwise land before it) and
    raises InvalidInputError naming the file and the reason; files before it stay ingested. The files set
    aside for the log (quarantine.py) are passed over, and the report names them. With `spark` offered, a
    backlog past its budget (or any, when asked) is read and shaped by Spark tasks (route.py).
    """
    from compaction_assets.ingest.connectors.registry import connector_for

    src, set_aside = _without(_source(folder, handle.name), Quarantine(handle.st).names(handle.name))
    ingested = handle.manifest().ingested  # read once: the route and the files still to ingest both need it
    backlog = pending_files(src, ingested) if spark is not None else []
    route = ingest_route(sum(f.size_bytes for f in backlog), spark)
    if connector_for(config.landing.format).native_records:
        report = _ingest_native(handle, config, src, ingested, drop_invalid, progress, route, spark)
    else:
        report = _ingest_connector(handle, config, src, ingested, drop_invalid, progress, route, spark)
    return dataclasses.replace(report, set_aside=set_aside, path=route.path, why=route.why)


def _reads(
    handle, src, in_process: AbstractContextManager[Any], route: IngestRoute, spark: SparkOffer | None, *args, **kw
):
    """What an ingestion appends, in order: `in_process`, produced in threads while each is appended
    (native_reads.read_files, log/read_ahead.py), or on the Spark route `SparkBuilt(session, handle, src, *args,
    **kw)` (spark_units.py), which builds the same items with the same function in Spark tasks. Both are
    context managers; `in_process` is not started on the Spark route."""
    if route.path == IN_PROCESS or spark is None:
        return in_process
    from compaction_assets.ingest.spark_units import SparkBuilt

    return SparkBuilt(spark.session(), handle, src, *args, **kw)


def _ingest_native(
    handle, config, src, ingested, drop_invalid: bool, progress, route: IngestRoute, spark
) -> IngestReport:
    """Today's record shape, one file at a time, the next files read while this one is appended
    (native_reads.py)."""
    from compaction_assets.ingest.connectors.layouts import recorded_names
    from compaction_assets.ingest.connectors.registry import connector_for
    from compaction_assets.ingest.formats.native_reads import Refused, read_file, read_files

    done = recorded_names(ingested)
    files = [
        u.main
        for u in connector_for(config.landing.format).units(src)
        if u.name not in done and Path(u.name).suffix.lower() in NATIVE_FILES.formats
    ]
    appended, records, dropped = [], 0, 0
    with _reads(handle, src, closing(read_files(src, files)), route, spark, files, read_file) as pending:
        for n, read in enumerate(pending, 1):
            if isinstance(read, Refused):
                raise _with_layout_hint(read.error, src, read.landed, handle.topic) from None
            if progress:
                progress(f"{handle.name}: ingesting {read.landed.name} ({n}/{len(files)})")
            try:
                res = append_table(
                    handle,
                    config,
                    read.path,
                    read.table,
                    read.lines,
                    drop_invalid=drop_invalid,
                    ingest_name=read.landed.name,
                )
            except InvalidInputError as exc:
                reworded = InvalidInputError(str(exc).replace(read.path, read.uri), row=exc.row)
                raise _with_layout_hint(reworded, src, read.landed, handle.topic) from None
            del read  # not held while the next file is read
            if res.already_ingested:
                continue
            appended.append(files[n - 1].name)
            records += res.records
            dropped += res.invalid_records
    return IngestReport(tuple(appended), records, dropped)


def _with_layout_hint(exc: InvalidInputError, src: Any, f: Any, topic: str) -> InvalidInputError:
    """A native file's refusal, naming the connector whose layout the file is in, if any: a sink's files
    landed before the topic's `landing.format` was set are refused for the record shape they do not have."""
    from compaction_assets.ingest.connectors.registry import layout_like
    from compaction_assets.topics.landing_settings import LandingFormat

    fmt = layout_like(src, f, LandingFormat.NATIVE)
    if fmt is None:
        return exc
    return InvalidInputError(
        f"{exc}; the file looks like the {fmt.value} connector's layout: set the topic's landing.format "
        f"(`compaction config set {topic} landing.format={fmt.value}`)",
        row=exc.row,
    )


def _ingest_connector(
    handle, config, src, ingested, drop_invalid: bool, progress, route: IngestRoute, spark
) -> IngestReport:
    """A connector's layout (compaction_assets/log/connectors): each unit all or nothing, at most once."""
    from compaction_assets.ingest.connectors.ingest import append_batch, batches, builder, plan_work
    from compaction_assets.ingest.connectors.stream import StreamedGroup
    from compaction_assets.ingest.spark_units import planned

    appended, records, dropped, from_mtime, inferred = [], 0, 0, 0, []
    # the Spark route plans every batch first (a streamed group's footers read here; it is read here too)
    work = planned(plan_work(src, config.landing, ingested)) if route.path != IN_PROCESS else []
    lazily = batches(src, config.landing, ingested)  # read only on the route in this process
    # the next batch is read and shaped while this one is appended (its error is raised after this one)
    with _reads(
        handle,
        src,
        ReadAhead(lazily),
        route,
        spark,
        work,
        builder(config.landing),
        here=lambda w: isinstance(w, StreamedGroup),
    ) as pending:
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
