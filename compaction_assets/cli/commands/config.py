"""The command line's `config` commands: `config show`, `config set` and `config apply`, how an operator
reads and changes the topic configuration stored in the store (a new version for each change, with who
made it; a strategy change on cleaned logs needs --confirm)."""

from __future__ import annotations

import os
from collections.abc import Callable

import click

from compaction_assets.cli import COMPACTION, command, command_group
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.store.log_store import wall_ms
from compaction_assets.store.names import parse_log_name
from compaction_assets.topics.applied_file import AppliedFiles, apply_topics_file
from compaction_assets.topics.config import load_topics
from compaction_assets.topics.config_store import (
    DEFAULTS_ENTRY,
    ConfigChange,
    check_strategy_change,
    cleaned_logs_of,
    logged_topics,
    parse_setting,
)

CONFIG = command_group(
    "config",
    "the topic configuration stored in the store (show, set, apply)",
    COMPACTION,
    example=("config show user-profiles", "config set user-profiles min.cleanable.dirty.ratio=0.3"),
)


@command(
    CONFIG,
    "show",
    help="stored configuration, version and source",
    example=("config show", "config show user-profiles --history"),
)
@click.argument("topic", required=False)
@click.option("--history", is_flag=True, help="every stored version")
def cmd_config_show(ctx: Context) -> int:
    """`config show [TOPIC] [--history]`: the stored configuration, its version and who changed it."""
    if not ctx.store.exists():
        raise CompactionError(f"no store at {ctx.store.location}: it does not exist")
    topics = (
        [ctx.args.topic]
        if ctx.args.topic
        else sorted(set(ctx.configs.topics()) | {parse_log_name(n)[0] for n in ctx.store.logs()})
    )
    out: list[dict[str, object]] = []
    for topic in topics:
        row: dict[str, object] = {"topic": topic, **ctx.configs.describe(topic).as_document()}
        if ctx.args.history:
            row["history"] = [c.as_dict() for c in ctx.configs.history(topic)]
        out.append(row)
    if not ctx.args.topic:
        defaults = ctx.configs.current(DEFAULTS_ENTRY)
        applied = [a.as_dict() for a in AppliedFiles(ctx.configs).all()]
        out.insert(0, {"defaults": defaults.as_dict() if defaults else None, "applied_files": applied})
    _emit(out)
    return 0


@command(
    CONFIG,
    "set",
    help="set keys of a topic's configuration (a new version)",
    example=("config set user-profiles min.cleanable.dirty.ratio=0.3 segment.ms=3600000",),
)
@click.argument("topic")
@click.argument("settings", nargs=-1, required=True, metavar="key=value...")
@click.option("--confirm", is_flag=True, help="allow a strategy change on cleaned logs")
def cmd_config_set(ctx: Context) -> int:
    """`config set TOPIC key=value ...`: store a new version of a topic's configuration."""
    values = dict(parse_setting(a) for a in ctx.args.settings)
    change = ctx.configs.plan_set(ctx.args.topic, values)
    stored = ctx.configs.set_topic(
        ctx.args.topic,
        values,
        "config set " + " ".join(ctx.args.settings),
        wall_ms(),
        cleaned_logs_of(ctx.store),
        ctx.args.confirm,
    )
    if stored is None:
        _progress(f"topic {ctx.args.topic}: nothing changes; no new version stored")
    version = stored.version if stored else ctx.configs.describe(ctx.args.topic).version
    _emit({"topic": ctx.args.topic, "version": version, "changed": change.changed, "stored": stored is not None})
    return 0


@command(
    CONFIG,
    "apply",
    help="store a topics file's configuration; prints the diff",
    example=("config apply topics.yaml --dry-run", "config apply topics.yaml"),
)
@click.argument("file", metavar="FILE")
@click.option("--dry-run", is_flag=True, help="print the diff, store nothing")
@click.option("--confirm", is_flag=True, help="allow a strategy change on cleaned logs")
def cmd_config_apply(ctx: Context) -> int:
    """`config apply TOPICS_FILE`: store a topics file's configuration; prints what changed."""
    topics = load_topics(ctx.args.file)
    known = logged_topics(ctx.store)
    source = f"config apply {os.path.abspath(ctx.args.file)}"
    defaults = ctx.configs.plan_defaults(topics)
    cleaned = cleaned_logs_of(ctx.store)
    if ctx.args.dry_run:  # the diff, with each change a real apply would refuse without --confirm
        changes = [c for c in ctx.configs.plan_apply(topics, known) if c.changed]
    else:  # recorded as applied: a deployment naming the same file does not apply it again
        changes = apply_topics_file(ctx.configs, ctx.args.file, source, wall_ms(), known, cleaned, ctx.args.confirm)
    _emit(
        {
            "file": ctx.args.file,
            "applied": not ctx.args.dry_run,
            "defaults": (
                defaults.changed
                if topics.has_defaults
                else "kept: the file has no `defaults` section, the store's defaults stay as they are"
            ),
            "changes": [
                {"topic": c.topic, "changed": c.changed, **_needs_confirm(c, cleaned, ctx.args.confirm)}
                for c in changes
            ],
        }
    )
    return 0


def _needs_confirm(change: ConfigChange, cleaned: Callable[[str], list[str]], confirm: bool) -> dict[str, object]:
    """{"needs_confirm": True, "refusal": why} for a change a real apply refuses without --confirm, else {}."""
    try:
        check_strategy_change(change, cleaned, confirm)
    except CompactionError as exc:
        return {"needs_confirm": True, "refusal": str(exc)}
    return {}
