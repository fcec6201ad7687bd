"""The command line's commands that write records into logs: `append` (files named on the command line,
all of them in one commit or none) and `ingest` (the new files of the landing area, each at most once; a log
that fails stops only itself)."""

from __future__ import annotations

import sys
from typing import Any

import click

from compaction_assets import settings
from compaction_assets.cleaning.decide.placement import memory_budget
from compaction_assets.cli import COMPACTION, NO_TABLE, command, follow
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.cli.landing_area import LANDING, backlogs, check_landed, landing_sources
from compaction_assets.errors import CompactionError, first_line
from compaction_assets.ingest.connectors.layouts import recorded_names
from compaction_assets.ingest.landing import append_files, ingest
from compaction_assets.ingest.route import SparkOffer


@command(
    COMPACTION,
    "append",
    help="append Parquet, JSON Lines or Avro files to a log (all in one commit, or none)",
    example=("append user-profiles-0 changes.jsonl", "append user-profiles-0 part-0.parquet part-1.parquet --no-table"),
)
@click.argument("log", shell_complete=store_logs)
@click.argument(
    "files",
    nargs=-1,
    required=True,
    metavar="FILE...",
    help=".parquet, .jsonl/.json/.ndjson or .avro files; every file is validated before any is appended",
)
@click.option("--drop-invalid", is_flag=True, help="drop records with a null key and count them")
@click.option("--default-timestamp", type=int, metavar="MS", help="timestamp for records that have none")
@NO_TABLE
def cmd_append(ctx: Context) -> int:
    """`append LOG FILE...`: append Parquet, JSON Lines or Avro files, all of them in one commit or none."""
    name, files = ctx.args.log, ctx.args.files
    handle, cfg = ctx.handle(name, must_exist=False), ctx.config(name)
    new_log = not handle.exists()
    try:
        done = append_files(handle, cfg, files, now=ctx.args.default_timestamp, drop_invalid=ctx.args.drop_invalid)
    except BaseException as exc:
        if new_log and not handle.exists():  # a refused first append leaves no empty log folder
            handle.st.delete(handle.dir)
        if isinstance(exc, CompactionError) and len(files) > 1:
            raise CompactionError(f"{exc}; nothing appended (none of the {len(files)} files)") from exc
        raise
    res = done.result
    _progress(
        f"{name}: appended {res.records} records from {len(files)} file(s) (offsets {res.first_offset}.."
        f"{res.last_offset}, {res.invalid_records} invalid dropped)"
    )
    _emit(
        {
            "log": name,
            "appended": res.records,
            "invalid_records_dropped": res.invalid_records,
            "first_offset": res.first_offset,
            "last_offset": res.last_offset,
            "files": [{"file": path, "records": n} for path, n in done.files],
            "log_end_offset": handle.manifest().log_end_offset,
            "table": follow.follow(ctx, [name])[name],  # the topic's table follows the log, before returning
        }
    )
    return 0


@command(
    COMPACTION,
    "ingest",
    help="append new files from the landing area (<landing>/<topic>/partition=<p>/)",
    example=("ingest", "ingest user-profiles-0 --landing s3://bucket/landing"),
)
@click.argument("logs", nargs=-1, metavar="[LOG]...", help="logs (default: every landing folder)")
@LANDING
@click.option("--drop-invalid", is_flag=True, help="drop records with a null key and count them")
@click.option(
    "--spark",
    is_flag=True,
    help="read and shape the files in Spark tasks, whatever the backlog (a backlog past COMPACTION_MEMORY_BUDGET "
    "goes to Spark anyway); each file is still committed here, in order, at most once",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="ingest nothing: print each log's landing backlog (the files an ingestion would take, their bytes, the "
    "age of the oldest, the files set aside)",
)
@NO_TABLE
def cmd_ingest(ctx: Context) -> int:
    """`ingest`: ingest new files of the landing folders, each file at most once. A log that fails is
    reported and the others go on (exit 1 when any failed), as `clean` does."""
    found = landing_sources(ctx)
    names = ctx.args.logs or sorted(found)
    check_landed(ctx, found, names)  # a typo is refused before any log is ingested
    if ctx.args.dry_run:
        _emit({b.log: b.as_document(names=True) for b in backlogs(ctx, found, names)})
        return 0
    out = {name: _ingest_log(ctx, name, found[name]) for name in names}
    existing = [name for name in out if ctx.handle(name, must_exist=False).exists()]
    for name, followed in follow.follow(ctx, existing).items():  # the topics' tables follow, one snapshot each
        out[name]["table"] = followed
    _emit(out)
    failed = [name for name, document in out.items() if "error" in document]
    if failed and len(out) > 1:  # one log's own error line says it all
        print(f"error: {len(failed)} of {len(out)} log(s) failed to ingest: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def _ingest_log(ctx: Context, name: str, source) -> dict[str, Any]:
    """One log's ingestion, as `ingest` prints it: its report, or its error (on stderr too) and the files
    it ingested before the error (they stay ingested)."""
    handle = ctx.handle(name, must_exist=False)
    new_log = not handle.exists()
    before = set() if new_log else recorded_names(handle.manifest().ingested)
    try:
        try:
            return ingest(
                handle,
                ctx.config(name),
                source,
                drop_invalid=ctx.args.drop_invalid,
                progress=_progress,
                spark=SparkOffer(lambda: ctx.spark, memory_budget(), requested=ctx.args.spark),
            ).as_document()
        finally:
            if new_log and not handle.exists():  # a refused first ingestion leaves no empty log folder
                handle.st.delete(handle.dir)
    except CompactionError as exc:
        error = str(exc)
    except Exception as exc:  # one log's surprise is its own failure; the other logs go on
        if settings.debug_enabled():
            raise
        error = f"unexpected {type(exc).__name__}: {first_line(exc, None, blank='')}"
    print(f"error: {name}: {error}", file=sys.stderr)
    done = [n for entry in handle.manifest().ingested for n in entry.split("|")] if handle.exists() else []
    files = [n for n in done if n not in before]
    return {"error": error, "files_ingested": len(files), "files": files}
