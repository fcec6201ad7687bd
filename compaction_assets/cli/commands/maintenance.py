"""The command line's log-maintenance commands: what an operator does to one log by hand, outside the
cleanings (`set-log-start`, `roll`, `set-checkpoint`, `clear-uncleanable`, `gc`); the Dagster operator
jobs (defs/jobs.py) offer the same changes from the UI."""

from __future__ import annotations

import click

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import evaluate_logs
from compaction_assets.cli import COMPACTION, NO_TABLE, command, follow
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError, OffsetError
from compaction_assets.log import writer


@command(
    COMPACTION,
    "set-log-start",
    help="move the log start offset up (deletes history below it)",
    example=("set-log-start user-profiles-0 1000", "set-log-start user-profiles-0 1000 --confirm"),
)
@click.argument("log", shell_complete=store_logs)
@click.argument("offset", type=int, metavar="N")
@click.option("--confirm", is_flag=True, help="delete the records below the offset")
@NO_TABLE
def cmd_set_log_start(ctx: Context) -> int:
    """`set-log-start LOG OFFSET`: move the log start offset forward (deletes records below it)."""
    handle = ctx.handle(ctx.args.log)
    m = handle.manifest()
    target = ctx.args.offset
    if target > m.log_end_offset:  # refused before saying what it would delete: it deletes nothing
        raise OffsetError(
            f"log {ctx.args.log}: set-log-start {target} is beyond the log end offset "
            f"{m.log_end_offset}; nothing was deleted"
        )
    below = [s for s in m.segments if s.base_offset < target]
    what = (
        f"log {ctx.args.log}: set-log-start {target} deletes offsets {m.log_start_offset}..{target - 1} "
        f"(up to {sum(s.records for s in below)} records in {len(below)} segment(s)); "
        f"they cannot be recovered"
    )
    if target <= m.log_start_offset:
        what = f"log {ctx.args.log}: log start is already {m.log_start_offset}; nothing below {target} to delete"
    if not ctx.args.confirm:
        raise CompactionError(f"{what}; repeat with --confirm to do it")
    _progress(what)
    m = writer.set_log_start(handle, target)
    followed = follow.follow(ctx, [ctx.args.log])[ctx.args.log]  # the records below go from the table too
    _emit({"log": ctx.args.log, "log_start_offset": m.log_start_offset, "table": followed})
    return 0


@command(
    COMPACTION,
    "roll",
    help="seal the active segment now, so a cleaning can take its records",
    example=("roll user-profiles-0",),
)
@click.argument("log", shell_complete=store_logs)
@NO_TABLE
def cmd_roll(ctx: Context) -> int:
    """`roll LOG`: seal the active segment now (the cleaner never touches the active segment)."""
    handle = ctx.handle(ctx.args.log)
    with handle.lock("append", purpose="roll"):
        m = writer.roll(handle)
    followed = follow.follow(ctx, [ctx.args.log])[ctx.args.log]  # a new version: the table records it too
    _emit(
        {
            "log": ctx.args.log,
            "segments": len(m.segments),
            "active_segment_base_offset": m.active.base_offset,
            "table": followed,
        }
    )
    return 0


@command(
    COMPACTION, "set-checkpoint", help="overwrite the cleaner checkpoint", example=("set-checkpoint user-profiles-0 0",)
)
@click.argument("log", shell_complete=store_logs)
@click.argument("offset", type=int, metavar="N")
def cmd_set_checkpoint(ctx: Context) -> int:
    """`set-checkpoint LOG OFFSET`: overwrite the cleaner checkpoint."""
    m = writer.set_checkpoint(ctx.handle(ctx.args.log), ctx.args.offset)
    _emit({"log": ctx.args.log, "checkpoint": m.checkpoint})
    return 0


@command(
    COMPACTION,
    "clear-uncleanable",
    help="clear the uncleanable mark once the log is repaired",
    example=("clear-uncleanable user-profiles-0", "clear-uncleanable --all"),
)
@click.argument("logs", nargs=-1, metavar="[LOG]...", shell_complete=store_logs)
@click.option("--all", is_flag=True, help="every log marked uncleanable")
def cmd_clear_uncleanable(ctx: Context) -> int:
    """`clear-uncleanable LOG... | --all`: clear failed cleanings' marks (--all: every marked log)."""
    if ctx.args.all == bool(ctx.args.logs):
        raise CompactionError("name one or more logs, or use --all (every log marked uncleanable)")
    if ctx.args.all:
        names = [
            st.log
            for st in evaluate_logs(ctx.store, ctx.config, ctx.now)
            if st.manifest is not None and st.manifest.uncleanable
        ]
    else:
        names = ctx.args.logs
    cleared = []
    for name in names:
        handle = ctx.handle(name)
        before = handle.manifest().uncleanable
        m = engine.clear_uncleanable(handle)
        cleared.append(
            {
                "log": name,
                "uncleanable": None if m.uncleanable is None else m.uncleanable.to_json(),
                "error_cleared": before.error if before else None,
            }
        )
        _progress(f"{name}: " + ("mark cleared" if before else "was not marked"))
    _emit(cleared[0] if len(ctx.args.logs) == 1 else cleared)
    return 0


@command(
    COMPACTION,
    "gc",
    help="remove files left by interrupted changes",
    example=("gc user-profiles-0", "gc user-profiles-0 --grace-seconds 0"),
)
@click.argument("log", shell_complete=store_logs)
@click.option(
    "--grace-seconds",
    type=float,
    default=600.0,
    metavar="S",
    help="only remove unreferenced files older than this (default 600.0)",
)
def cmd_gc(ctx: Context) -> int:
    """`gc`: collect files no manifest references, after the grace period."""
    handle = ctx.handle(ctx.args.log)
    with handle.lock("clean", purpose="garbage collection"):
        removed = handle.collect_garbage(ctx.args.grace_seconds)
    _emit({"log": ctx.args.log, "removed_files": len(removed)})
    return 0
