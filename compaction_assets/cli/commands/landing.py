"""The command line's `landing` commands: `landing status` (each log's landing backlog: files and bytes
pending, the age of the oldest, the files set aside), `landing quarantine` (set a landing file aside, with
its reason, so that its log's ingestion goes on past it) and `landing release` (put it back)."""

from __future__ import annotations

import click

from compaction_assets.cli import COMPACTION, command, command_group
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.cli.landing_area import LANDING, backlogs, check_landed, landing_sources
from compaction_assets.errors import CompactionError
from compaction_assets.ingest.connectors.layouts import recorded_names
from compaction_assets.ingest.landing import landed_file, pending_files, unit_names
from compaction_assets.ingest.quarantine import Quarantine, SetAside, operator
from compaction_assets.store.log_store import wall_ms

LANDING_GROUP = command_group(
    "landing", "the landing area: each log's backlog, and files set aside (status, quarantine, release)", COMPACTION
)
SHOWN_PENDING = 5  # pending files a refusal lists (the backlog has them all)


@command(
    LANDING_GROUP,
    "status",
    help="each log's landing backlog: files and bytes pending, the age of the oldest, files set aside "
    "(e.g. `compaction landing status users-0 --files`)",
    example=("landing status", "landing status users-0 --files"),
)
@click.argument(
    "logs", nargs=-1, metavar="[LOG]...", help="logs (default: every landing folder and every log with files set aside)"
)
@LANDING
@click.option("--files", is_flag=True, help="list the pending files' names too")
def cmd_landing_status(ctx: Context) -> int:
    """`landing status [LOG...]`: each log's landing backlog, nothing written."""
    found = landing_sources(ctx)
    aside = Quarantine(ctx.store.storage).logs() if ctx.store.exists() else []
    names = ctx.args.logs or sorted(set(found) | set(aside))
    check_landed(ctx, found, names, frozenset(aside))
    _emit([b.as_document(names=ctx.args.files) for b in backlogs(ctx, found, names)])
    return 0


@command(
    LANDING_GROUP,
    "quarantine",
    help="set a landing file aside, with its reason: its log's ingestion passes over it until `landing release` "
    "(e.g. `compaction landing quarantine users-0 b.jsonl --reason 'JSON array, TICKET-7'`)",
    example=("landing quarantine users-0 0007.jsonl --reason 'a list, not an object'",),
)
@click.argument("log", shell_complete=store_logs)
@click.argument("file", metavar="FILE", help="the file's name as `landing status --files` lists it, its path or URI")
@click.option("--reason", required=True, metavar="TEXT", help="why it is set aside (kept with it, shown by status)")
@LANDING
def cmd_landing_quarantine(ctx: Context) -> int:
    """`landing quarantine LOG FILE --reason TEXT`: set a pending landing file aside (the landing area is
    left as it is; the store records it)."""
    log, reason = ctx.args.log, ctx.args.reason.strip()
    if not reason:
        raise CompactionError("--reason is empty: say why the file is set aside (it is kept with it)")
    found = landing_sources(ctx)
    check_landed(ctx, found, [log])
    handle = ctx.handle(log, must_exist=False)
    ingested = tuple(handle.manifest().ingested) if handle.exists() else ()
    landed = landed_file(found[log], log, ctx.args.file)
    if landed is None:
        aside = Quarantine(ctx.store.storage).names(log)
        pending = [f.name for f in pending_files(found[log], ingested, aside)]
        shown = ", ".join(pending[:SHOWN_PENDING]) + (", ..." if len(pending) > SHOWN_PENDING else "")
        raise CompactionError(
            f"{log}: no landing file {ctx.args.file!r} under {ctx.landing} (pending: {shown or 'none'})"
        )
    if landed.name in recorded_names(ingested):
        raise CompactionError(f"{log}: {landed.name} is already ingested; nothing to set aside")
    files = unit_names(found[log], log, ctx.config(log), landed.name)
    entry = Quarantine(ctx.store.storage).add(log, SetAside(landed.name, reason, wall_ms(), operator(), files))
    _progress(f"{log}: {landed.name} set aside; ingestion passes over it until `landing release {log} {landed.name}`")
    _emit({"log": log, **entry.as_document()})
    return 0


@command(
    LANDING_GROUP,
    "release",
    help="put a file set aside back: the next ingestion of its log takes it "
    "(e.g. `compaction landing release users-0 b.jsonl`)",
    example=("landing release users-0 0007.jsonl",),
)
@click.argument("log", shell_complete=store_logs)
@click.argument("file", metavar="FILE", help="the file's name as `landing status` lists it under set_aside")
def cmd_landing_release(ctx: Context) -> int:
    """`landing release LOG FILE`: the file is pending again."""
    log = ctx.args.log
    quarantine = Quarantine(ctx.store.storage)
    held = quarantine.names(log)
    # a path or URI names the file as its last part (or tombstone/<name>, a Confluent tombstone file's)
    parts = ctx.args.file.replace("\\", "/").split("/")
    name = next((n for n in (ctx.args.file, "/".join(parts[-2:]), parts[-1]) if n in held), ctx.args.file)
    entry = quarantine.remove(log, name)
    _progress(f"{log}: {', '.join(entry.files)} pending again; the next ingestion of {log} takes it")
    _emit({"log": log, "released": entry.as_document()})
    return 0
