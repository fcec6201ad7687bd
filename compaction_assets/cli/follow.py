"""What a command that changes logs does for their topics' tables: bring them to the logs' new versions
(`follow`, before the command returns), and each log's table lag as the reading commands show it (`lag`).
Kept apart from cli/commands/table.py, whose commands register the `table` group: the commands that use these
register where they are declared."""

from __future__ import annotations

from typing import Any

from compaction_assets.cli.context import Context, _progress
from compaction_assets.errors import CompactionError

# what a command's output says of each log's table when the tables do not follow it
TABLES_OFF = {"skipped": "tables are off (COMPACTION_TABLES, or the command's opt-out)"}


def follow(ctx: Context, logs: list[str]) -> dict[str, dict[str, Any]]:
    """Bring the tables of `logs` to their logs' current versions after the command changed them (one
    snapshot per topic, nothing built when already there; skipped with COMPACTION_TABLES off or the
    command's opt-out); what each log's table did, as the command's output shows it."""
    from compaction_assets.table.commit.commit import LogCommit
    from compaction_assets.table.follow import follow_logs

    if not ctx.tables_follow or not logs:
        return {log: dict(TABLES_OFF) for log in logs}
    # (checked above: the commit need not read the settings again)
    done = follow_logs([LogCommit(ctx.handle(log), ctx.config(log)) for log in logs], now=ctx.now, enabled=True)
    out: dict[str, dict[str, Any]] = {}
    for log in logs:
        error, r = done.error_of(log), done.result_of(log)
        if error is not None or r is None:
            why = str(error) if error is not None else "no version to commit"
            _progress(f"{log}: table not committed ({why}); the next commit catches up")
            out[log] = {"error": why}
            continue
        what = (
            f"{r.rows_added} rows added, {r.rows_deleted} deleted, {r.rows_masked} old rows masked"
            if r.committed
            else "already there"
        )
        _progress(f"{log}: table {r.identifier} at log version {r.log_version} ({what})")
        out[log] = r.as_document()
    return out


def lag(ctx: Context, logs: list[str], manifests: dict | None = None) -> dict[str, dict[str, Any]]:
    """Each log's table lag at the command's time (its topic's table read once; `manifests`: the logs'
    current manifests when read already), as the output shows it; {} when tables are off."""
    from compaction_assets.table.reading.lag import lags

    if not ctx.env.tables.enabled:
        return {}
    manifests = manifests or {}
    try:
        found = lags(
            [(ctx.handle(log), ctx.config(log), manifests.get(log) or ctx.handle(log).manifest()) for log in logs],
            ctx.now,
        )
    except CompactionError as exc:  # the logs' own figures still show; the lag says why it has none
        return {log: {"error": str(exc)} for log in logs}
    return {log: found[log].as_document() for log in logs}
