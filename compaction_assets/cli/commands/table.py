"""The command line's `table` commands and `latest-state --as-of` (the topics' Iceberg tables).

`table show|scan|history TOPIC` read a topic's table, `table changes TOPIC --from` tells what changed in it
between two snapshots (a changes feed), `table commit [LOG ...]` commits logs' latest states to their
topics' tables (what the Dagster `latest_state` asset does), `table drop|rebuild TOPIC` drop a table (and
build it again from the logs), `latest-state LOG --as-of` reads the table as it was. Results go to stdout
as JSON (JSON Lines for rows), like the other commands.
"""

from __future__ import annotations

import json
from typing import Any

import click

from compaction_assets.cli import COMPACTION, command, command_group, encoding
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _progress
from compaction_assets.cli.follow import lag
from compaction_assets.errors import CompactionError
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import TableError, locate
from compaction_assets.table.reading.feed import changes
from compaction_assets.table.reading.read import history, open_table, scan, snapshot_as_of
from compaction_assets.table.summary import marks_of

ROW_FIELDS = ("key", "value")

TABLE = command_group(
    "table",
    "the topics' Iceberg tables (show, scan, history, changes, commit, drop, rebuild)",
    COMPACTION,
    example=("table show user-profiles", "table scan user-profiles --limit 10"),
)
TOPIC = click.argument("topic", help="the topic whose table to read")


def _rows(snap) -> int:
    """The snapshot's live rows: its data files' rows less the rows its position deletes mask (one each)."""
    props = snap.summary.additional_properties if snap else {}
    return int(props.get("total-records", 0)) - int(props.get("total-position-deletes", 0))


def _print_rows(ctx: Context, topic: str, rows, op: str | None = None) -> None:
    """Rows as JSON Lines (each led by `"op": op` when given), their bytes as `read` prints them
    (cli/encoding.py)."""
    version = encoding.version_header(ctx.topic_config(topic))
    lead = {"op": op} if op is not None else {}
    for row in rows.to_pylist():
        print(json.dumps({**lead, **encoding.table_row(row, version)}, default=str))


@command(
    TABLE, "show", help="identifier, columns, partitioning, current snapshot", example=("table show user-profiles",)
)
@TOPIC
def cmd_table_show(ctx: Context) -> int:
    """`table show TOPIC`: the table's identifier, location, columns, partitioning and current snapshot."""
    table, ident = open_table(ctx.store.storage, ctx.args.topic)
    snap = table.current_snapshot()
    loc = locate(ctx.store.storage)
    print(
        json.dumps(
            {
                "table": ident,
                "catalog": loc.describe(),
                "location": table.location(),
                "columns": [
                    {"name": f.name, "type": str(f.field_type), "required": f.required} for f in table.schema().fields
                ],
                "identifier_fields": sorted(table.schema().identifier_field_names()),
                "partitioning": [f"{f.name}: {f.transform}" for f in table.spec().fields],
                "snapshot_id": snap.snapshot_id if snap else None,
                "snapshots": len(table.snapshots()),
                "rows": _rows(snap),
                "log_versions": {k: v.version for k, v in marks_of(snap).items()},
                "lag": lag(ctx, [log for log in ctx.store.logs() if parse_log_name(log)[0] == ctx.args.topic]),
            },
            indent=2,
        )
    )
    return 0


@command(TABLE, "scan", help="the rows, as JSON Lines", example=("table scan user-profiles --partition 0 --limit 10",))
@TOPIC
@click.option("--partition", type=int, metavar="P", help="one partition's rows")
@click.option("--snapshot-id", type=int, metavar="ID", help="as of this snapshot (default: the current one)")
@click.option("--limit", type=int, metavar="N", help="at most this many rows")
def cmd_table_scan(ctx: Context) -> int:
    """`table scan TOPIC`: the table's rows (or one partition's, at a snapshot) as JSON Lines."""
    if ctx.args.limit is not None and ctx.args.limit < 0:
        raise CompactionError(f"--limit {ctx.args.limit}: must be 0 or more")
    table, _ = open_table(ctx.store.storage, ctx.args.topic)
    _print_rows(ctx, ctx.args.topic, scan(table, ctx.args.snapshot_id, ctx.args.partition, ctx.args.limit))
    return 0


@command(
    TABLE, "history", help="snapshots with the log versions each reflects", example=("table history user-profiles",)
)
@TOPIC
def cmd_table_history(ctx: Context) -> int:
    """`table history TOPIC`: every snapshot, oldest first, with the log versions it reflects."""
    table, _ = open_table(ctx.store.storage, ctx.args.topic)
    print(json.dumps([s.__dict__ for s in history(table)], indent=2))
    return 0


@command(
    TABLE,
    "changes",
    help="the keys upserted and deleted between two snapshots, as JSON Lines",
    example=(
        "table changes user-profiles --from 2026-12-07T10:00:00Z",
        "table changes user-profiles --from SNAPSHOT_ID",
    ),
)
@TOPIC
@click.option(
    "--from",
    "from_",
    required=True,
    metavar="SNAPSHOT|TIME",
    help="a snapshot id, or a time (ms since the epoch, or ISO-8601): the snapshot current then",
)
@click.option("--to", metavar="SNAPSHOT|TIME", help="as --from (default: the current snapshot)")
def cmd_table_changes(ctx: Context) -> int:
    """`table changes TOPIC --from X [--to Y]`: one line per key upserted (`"op": "upsert"` and its row at Y)
    or deleted (`"op": "delete"`, partition and key) from snapshot X to snapshot Y; the counts on stderr."""
    table, ident = open_table(ctx.store.storage, ctx.args.topic)
    result = changes(table, ctx.args.from_, ctx.args.to)
    _print_rows(ctx, ctx.args.topic, result.upserts, "upsert")
    _print_rows(ctx, ctx.args.topic, result.deletes, "delete")
    _progress(f"{ident}: {result.summary()}")
    return 0


@command(
    TABLE,
    "commit",
    help="commit logs' latest states to their topics' tables",
    example=("table commit", "table commit user-profiles-0 user-profiles-1"),
)
@click.argument("logs", nargs=-1, metavar="[LOG]...", shell_complete=store_logs, help="logs (default: all)")
def cmd_table_commit(ctx: Context) -> int:
    """`table commit [LOG ...]`: commit each log's latest state to its topic's table (all logs by default),
    the logs of one topic in one snapshot."""
    # imported here: a commit builds latest states (state/, Spark's side), which no other command needs
    from compaction_assets.table.commit.commit import LogCommit, commit_logs

    by_topic: dict[str, list[LogCommit]] = {}
    for log in ctx.args.logs or ctx.store.logs():
        by_topic.setdefault(parse_log_name(log)[0], []).append(LogCommit(ctx.handle(log), ctx.config(log)))
    out = []
    for logs in by_topic.values():
        out += [_commit_document(r) for r in commit_logs(logs, now=ctx.now)]
    print(json.dumps(out, indent=2))
    return 0


def _commit_document(r) -> dict[str, Any]:
    """One log's commit as `table commit` and `table rebuild` print it."""
    return {
        "log": r.log,
        **r.as_document(),
        "files_added": r.files_added,
        "delete_files_added": r.delete_files_added,
        "files_removed": r.files_removed,
        "snapshots_expired": r.expiry.snapshots_expired if r.expiry else 0,
    }


def _topic_logs(ctx: Context, topic: str) -> list[str]:
    """The store's logs of the topic."""
    return [log for log in ctx.store.logs() if parse_log_name(log)[0] == topic]


@command(
    TABLE,
    "drop",
    help="drop the topic's table: its catalog entry and its files (the logs stay)",
    example=("table drop user-profiles",),
)
@TOPIC
def cmd_table_drop(ctx: Context) -> int:
    """`table drop TOPIC`: the topic's table leaves the catalog and its files are removed; its logs stay,
    and the next commit (or `table rebuild`) builds it again from them."""
    from compaction_assets.table.lifecycle import drop_table

    topic = ctx.args.topic
    dropped = drop_table(ctx.store.storage, topic, ctx.configs.config_for(topic).table_name)
    if not dropped.dropped:
        raise TableError(f"topic {topic!r} has no table {dropped.table} (nothing to drop)")
    _progress(f"{topic}: table {dropped.table} dropped, {dropped.files_removed} files removed")
    print(json.dumps(dropped.as_document(), indent=2))
    return 0


@command(
    TABLE,
    "rebuild",
    help="drop the topic's table, then commit every log of the topic from its latest state",
    example=("table rebuild user-profiles",),
)
@TOPIC
def cmd_table_rebuild(ctx: Context) -> int:
    """`table rebuild TOPIC`: drop the table (when there is one), then commit every log of the topic from
    its latest state in one snapshot."""
    from compaction_assets.table.commit.commit import LogCommit
    from compaction_assets.table.lifecycle import rebuild_table

    topic = ctx.args.topic
    logs = _topic_logs(ctx, topic)
    if not logs:
        raise TableError(f"topic {topic!r} has no log in the store at {ctx.store.location} (nothing to rebuild from)")
    rebuilt = rebuild_table(topic, [LogCommit(ctx.handle(log), ctx.config(log)) for log in logs], now=ctx.now)
    print(
        json.dumps(
            {"dropped": rebuilt.dropped.as_document(), "committed": [_commit_document(r) for r in rebuilt.committed]},
            indent=2,
        )
    )
    return 0


def latest_state_as_of(ctx: Context) -> int:
    """`latest-state LOG --as-of VERSION|TIME`: the log's rows of its topic's table as they were then."""
    topic, partition = parse_log_name(ctx.args.log)
    table, _ = open_table(ctx.store.storage, topic)
    snap = snapshot_as_of(table, ctx.args.log, ctx.args.as_of)
    rows = scan(table, snap.snapshot_id, partition).drop_columns(["partition"])
    _print_rows(ctx, topic, rows)
    return 0
