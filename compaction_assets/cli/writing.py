"""The command line's commands that write records into logs: `append` (files named on the command line,
all of them in one commit or none) and `ingest` (the new files of the landing area, each at most once)."""

from __future__ import annotations

import click

from compaction_assets.cli import follow
from compaction_assets.cli.command_line import COMPACTION, NO_TABLE, command
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.ingest.landing import append_files, ingest, landing_logs
from compaction_assets.store.fs import Storage


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
@click.option(
    "--landing",
    metavar="DIR",
    help="landing root (env COMPACTION_LANDING, default var/landing under the current directory); a local folder "
    "that does not exist is an error",
)
@click.option("--drop-invalid", is_flag=True, help="drop records with a null key and count them")
@NO_TABLE
def cmd_ingest(ctx: Context) -> int:
    """`ingest`: ingest new files of the landing folders, each file at most once."""
    landing = Storage.open(str(ctx.landing))
    if landing.local and not landing.is_dir(landing.root):
        raise CompactionError(
            f"no landing area at {landing.root}: it does not exist (--landing or "
            "COMPACTION_LANDING names it; default var/landing under the current directory)"
        )
    found, refused = landing_logs(ctx.landing, ctx.store.storage)
    for reason in refused:
        _progress(f"ignored: {reason}")
    out = {}
    for name in ctx.args.logs or sorted(found):
        if name not in found:
            raise CompactionError(f"no landing folder for log {name!r} under {ctx.landing}")
        handle = ctx.handle(name, must_exist=False)
        new_log = not handle.exists()
        try:
            out[name] = ingest(
                handle, ctx.config(name), found[name], drop_invalid=ctx.args.drop_invalid, progress=_progress
            ).as_document()
        except BaseException:
            if new_log and not handle.exists():  # a refused first ingestion leaves no empty log folder
                handle.st.delete(handle.dir)
            raise
    for name, followed in follow.follow(ctx, list(out)).items():  # the topics' tables follow, one snapshot each
        out[name]["table"] = followed
    _emit(out)
    return 0
