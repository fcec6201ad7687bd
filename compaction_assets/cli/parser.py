"""The operator command line's parser (`compaction COMMAND ...`): the global options, accepted before the
command and after it, and one sub-command per operation (reading, writing, `config` and `table` families),
each mapped to the `cmd_` function that runs it (the mapping comes from cli/__init__.py)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """--store, --topics, --now: accepted before the command and after it."""
    d = {"default": argparse.SUPPRESS} if suppress else {"default": None}
    parser.add_argument(
        "--store", help="log store root (env COMPACTION_STORE; default var/store under the current directory)", **d
    )
    parser.add_argument(
        "--topics",
        help="topics file to check against (and, for a topic the store has no "
        "configuration for yet, to store); env COMPACTION_TOPICS",
        **d,
    )
    parser.add_argument("--now", type=int, help="evaluate at this time (ms since epoch) instead of the clock", **d)


def command_parser(commands: Mapping[str, Callable], description: str) -> argparse.ArgumentParser:
    """The command line's parser: global options and one sub-command per operation; `commands` maps
    each command function's name (`cmd_logs`, ...) to it."""
    p = argparse.ArgumentParser(prog="compaction", description=description)
    _global_options(p, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)
    _add_parser = sub.add_parser

    def add_parser(name: str, **kw) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help"))  # `COMMAND --help` says what the command does
        return _add_parser(name, parents=[common], **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]

    _reading_commands(sub, commands)
    _writing_commands(sub, commands)
    _config_commands(sub, common, commands)
    _table_commands(sub, common, commands)
    return p


def _reading_commands(sub, commands: Mapping[str, Callable]) -> None:
    """The commands that read a log or the store: logs, metrics, describe, plan, clean, read."""
    sub.add_parser("logs", help="list logs with their dirty ratio and eligibility").set_defaults(
        fn=commands["cmd_logs"]
    )
    sub.add_parser(
        "metrics", help="figures across logs (max-dirty-percent, uncleanable-partitions-count, uncleanable-bytes, ...)"
    ).set_defaults(fn=commands["cmd_metrics"])
    s = sub.add_parser("describe", help="segments, ranges, sizes, checkpoint and state of a log")
    s.add_argument("log")
    s.set_defaults(fn=commands["cmd_describe"])
    s = sub.add_parser("plan", help="dry run: what a cleaning would remove and why")
    s.add_argument("logs", nargs="*", help="logs (default: all)")
    s.add_argument("--metadata-only", action="store_true", help="only the evaluation; no Spark")
    s.add_argument(
        "--force",
        action="store_true",
        help="dry-run the cleaning as if forced, even if not eligible (ignored with --metadata-only)",
    )
    s.set_defaults(fn=commands["cmd_plan"])
    s = sub.add_parser("clean", help="clean logs (eligible ones with --all, in priority order)")
    s.add_argument("logs", nargs="*")
    s.add_argument("--all", action="store_true", help="every eligible log, highest dirty ratio first")
    s.add_argument("--force", action="store_true", help="clean even if not eligible")
    s.set_defaults(fn=commands["cmd_clean"])
    s = sub.add_parser("read", help="records from an offset, as JSON lines")
    s.add_argument("log")
    s.add_argument(
        "--from",
        dest="from_offset",
        type=int,
        default=0,
        help="first offset to read (default 0; records below the log start are gone)",
    )
    s.add_argument("--limit", type=int, help="print at most this many records (default: all)")
    s.set_defaults(fn=commands["cmd_read"])


def _writing_commands(sub, commands: Mapping[str, Callable]) -> None:
    """The commands that write: latest-state, append, the log-maintenance ones (`_maintenance_commands`),
    ingest."""
    s = sub.add_parser("latest-state", help="the key -> value table of a log")
    s.add_argument("log")
    s.add_argument("--output", help="write Parquet here instead of printing JSON lines")
    s.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a non-empty --output folder that an earlier latest-state did not write",
    )
    s.add_argument("--as-of", help="the topic's table as of a log version or a time (ms, or ISO-8601)")
    s.set_defaults(fn=commands["cmd_latest_state"])
    s = sub.add_parser("append", help="append Parquet, JSON Lines or Avro files to a log (all in one commit, or none)")
    s.add_argument("log")
    s.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help=".parquet, .jsonl/.json/.ndjson or .avro files; every file is validated before any is appended",
    )
    s.add_argument("--drop-invalid", action="store_true", help="drop records with a null key and count them")
    s.add_argument("--default-timestamp", type=int, help="timestamp for records that have none")
    s.set_defaults(fn=commands["cmd_append"])
    _maintenance_commands(sub, commands)
    s = sub.add_parser("ingest", help="append new files from the landing area (<landing>/<topic>/partition=<p>/)")
    s.add_argument("logs", nargs="*", help="logs (default: every landing folder)")
    s.add_argument(
        "--landing",
        default=None,
        help="landing root (env COMPACTION_LANDING, default var/landing "
        "under the current directory); a local folder that does not exist is an error",
    )
    s.add_argument("--drop-invalid", action="store_true", help="drop records with a null key and count them")
    s.set_defaults(fn=commands["cmd_ingest"])


def _maintenance_commands(sub, commands: Mapping[str, Callable]) -> None:
    """What an operator does to one log by hand: set-log-start, roll, set-checkpoint, clear-uncleanable, gc."""
    s = sub.add_parser("set-log-start", help="move the log start offset up (deletes history below it)")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.add_argument("--confirm", action="store_true", help="delete the records below the offset")
    s.set_defaults(fn=commands["cmd_set_log_start"])
    s = sub.add_parser("roll", help="seal the active segment now, so a cleaning can take its records")
    s.add_argument("log")
    s.set_defaults(fn=commands["cmd_roll"])
    s = sub.add_parser("set-checkpoint", help="overwrite the cleaner checkpoint")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.set_defaults(fn=commands["cmd_set_checkpoint"])
    s = sub.add_parser("clear-uncleanable", help="clear the uncleanable mark once the log is repaired")
    s.add_argument("logs", nargs="*", metavar="LOG")
    s.add_argument("--all", action="store_true", help="every log marked uncleanable")
    s.set_defaults(fn=commands["cmd_clear_uncleanable"])
    s = sub.add_parser("gc", help="remove files left by interrupted changes")
    s.add_argument("log")
    s.add_argument(
        "--grace-seconds",
        type=float,
        default=600.0,
        help="only remove unreferenced files older than this (default %(default)s)",
    )
    s.set_defaults(fn=commands["cmd_gc"])


def _config_commands(sub, common: argparse.ArgumentParser, commands: Mapping[str, Callable]) -> None:
    """`config show | set | apply`: the topic configuration stored in the store."""
    s = sub.add_parser("config", help="the topic configuration stored in the store (show, set, apply)")
    csub = s.add_subparsers(dest="config_command", required=True)
    c = csub.add_parser("show", parents=[common], help="stored configuration, version and source")
    c.add_argument("topic", nargs="?")
    c.add_argument("--history", action="store_true", help="every stored version")
    c.set_defaults(fn=commands["cmd_config_show"])
    c = csub.add_parser("set", parents=[common], help="set keys of a topic's configuration (a new version)")
    c.add_argument("topic")
    c.add_argument("settings", nargs="+", metavar="key=value")
    c.add_argument("--confirm", action="store_true", help="allow a strategy change on cleaned logs")
    c.set_defaults(fn=commands["cmd_config_set"])
    c = csub.add_parser("apply", parents=[common], help="store a topics file's configuration; prints the diff")
    c.add_argument("file")
    c.add_argument("--dry-run", action="store_true", help="print the diff, store nothing")
    c.add_argument("--confirm", action="store_true", help="allow a strategy change on cleaned logs")
    c.set_defaults(fn=commands["cmd_config_apply"])


def _table_commands(sub, common: argparse.ArgumentParser, commands: Mapping[str, Callable]) -> None:
    """`table show | scan | history TOPIC` and `table commit [LOG ...]`: the topics' Iceberg tables."""
    s = sub.add_parser("table", help="the topics' Iceberg tables (show, scan, history, commit)")
    tsub = s.add_subparsers(dest="table_command", required=True)
    for name, text in (
        ("show", "identifier, columns, partitioning, current snapshot"),
        ("scan", "the rows, as JSON Lines"),
        ("history", "snapshots with the log versions each reflects"),
    ):
        t = tsub.add_parser(name, parents=[common], help=text, description=text)
        t.add_argument("topic", help="the topic whose table to read")
        t.set_defaults(fn=commands[f"cmd_table_{name}"])
        if name == "scan":
            t.add_argument("--partition", type=int, help="one partition's rows")
            t.add_argument("--snapshot-id", type=int, help="as of this snapshot (default: the current one)")
            t.add_argument("--limit", type=int, help="at most this many rows")
    t = tsub.add_parser(
        "commit",
        parents=[common],
        help="commit logs' latest states to their topics' tables",
        description="commit logs' latest states to their topics' tables",
    )
    t.add_argument("logs", nargs="*", metavar="LOG", help="logs (default: all)")
    t.set_defaults(fn=commands["cmd_table_commit"])
