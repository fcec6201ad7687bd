"""The operator command line's record output: `read` (JSON Lines in the format `append` reads) and
`latest-state` (printed, or written as Parquet into a folder it marks as its own)."""

from __future__ import annotations

import json
import os

import click

from compaction_assets.cli import COMPACTION, command, encoding
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import wall_ms


def record_json(r, version_header: str | None = None) -> dict:
    """One record in the JSON Lines format `append` accepts (docs/cli.md, "Record format"; bytes as
    cli/encoding.py prints them, `version_header`'s value as its number); the delete horizon is the
    cleaner's state, not part of the record, and is not printed."""
    obj: dict = {"offset": r.offset}
    encoding.put_bytes(obj, "key", r.key)
    encoding.put_bytes(obj, "value", r.value)
    obj["timestamp"] = r.timestamp
    obj["headers"] = encoding.headers(r.headers, version_header)
    return obj


@command(
    COMPACTION,
    "read",
    help="records from an offset, as JSON lines",
    example=("read user-profiles-0 --from 100 --limit 10", "read user-profiles-0 > copy.jsonl"),
)
@click.argument("log", shell_complete=store_logs)
@click.option(
    "--from",
    "from_offset",
    type=int,
    default=0,
    metavar="N",
    help="first offset to read (default 0; records below the log start are gone)",
)
@click.option("--limit", type=int, metavar="N", help="print at most this many records (default: all)")
def cmd_read(ctx: Context) -> int:
    """`read LOG`: the log's visible records as JSON Lines."""
    from compaction_assets.log.reader import iter_records

    for flag, value in (("--from", ctx.args.from_offset), ("--limit", ctx.args.limit)):
        if value is not None and value < 0:
            raise CompactionError(f"{flag} {value}: must be 0 or more")
    version = encoding.version_header(ctx.config(ctx.args.log))
    for i, rec in enumerate(iter_records(ctx.handle(ctx.args.log), ctx.args.from_offset)):
        if ctx.args.limit is not None and i >= ctx.args.limit:
            break
        print(json.dumps(record_json(rec, version)))
    return 0


@command(
    COMPACTION,
    "latest-state",
    help="the key -> value table of a log",
    example=(
        "latest-state user-profiles-0",
        "latest-state user-profiles-0 --output out/user-profiles-0",
        "latest-state user-profiles-0 --as-of 2024-05-01T00:00:00Z",
    ),
)
@click.argument("log", shell_complete=store_logs)
@click.option("--output", metavar="DIR", help="write Parquet here instead of printing JSON lines")
@click.option(
    "--overwrite",
    is_flag=True,
    help="replace a non-empty --output folder that an earlier latest-state did not write",
)
@click.option(
    "--as-of", metavar="VERSION|TIME", help="the topic's table as of a log version or a time (ms, or ISO-8601)"
)
def cmd_latest_state(ctx: Context) -> int:
    """`latest-state LOG`: the key -> value table, printed or written as Parquet."""
    from compaction_assets.state.latest_state import (
        fits_in_process,
        latest_state_df,
        latest_state_table,
        write_latest_state,
    )

    if ctx.args.as_of is not None:  # the topic's table as it was (compaction_assets/cli/commands/table.py)
        from compaction_assets.cli.commands.table import latest_state_as_of

        return latest_state_as_of(ctx)
    handle, cfg = ctx.handle(ctx.args.log), ctx.config(ctx.args.log)  # before Spark starts
    output = ctx.args.output
    m = handle.manifest()
    if output:
        _check_output_folder(output, ctx.args.log, ctx.args.overwrite)
        st = Storage.open(output)
        rows = write_latest_state(handle, cfg, st, st.root, lambda: ctx.spark, m)
        with open(os.path.join(output, LATEST_STATE_MARKER), "w") as fh:
            json.dump({"log": ctx.args.log, "written_ms": wall_ms()}, fh)
        _progress(f"wrote the latest state ({rows} keys) to {output}")
        return 0
    # a small log needs no Spark (built here with Arrow, sorted by key)
    rows = (
        latest_state_table(handle, cfg, m).to_pylist()
        if fits_in_process(m)
        else latest_state_df(ctx.spark, handle, cfg, m).orderBy("key").toLocalIterator()
    )
    for row in rows:
        obj: dict = {}
        encoding.put_bytes(obj, "key", row["key"])
        encoding.put_bytes(obj, "value", row["value"])
        obj["offset"] = row["offset"]
        print(json.dumps(obj))
    return 0


# Written into a `latest-state --output` folder: a later run may replace a folder that holds it.
LATEST_STATE_MARKER = "_COMPACTION_LATEST_STATE"


def _check_output_folder(output: str, log: str, overwrite: bool) -> None:
    """Refuse to replace a folder this command did not write (Spark's overwrite empties it)."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise CompactionError(f"--output {output}: exists and is not a folder")
    if not os.path.isdir(output) or not os.listdir(output) or overwrite:
        return
    if not os.path.exists(os.path.join(output, LATEST_STATE_MARKER)):
        raise CompactionError(
            f"--output {output}: the folder is not empty and is not an earlier latest-state "
            "output; its files would be deleted (name an empty or new folder, or add --overwrite)"
        )
