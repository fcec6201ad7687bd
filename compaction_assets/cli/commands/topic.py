"""The command line's `topic` commands: `topic delete TOPIC` removes a topic from the store (its logs,
configuration, table, latest-state files and landing records; table/topic_delete.py), and says what it
would remove, changing nothing, without `--yes`."""

from __future__ import annotations

import click

from compaction_assets.cli import COMPACTION, command, command_group
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError

TOPIC_GROUP = command_group("topic", "a topic's lifecycle (delete)", COMPACTION)


@command(
    TOPIC_GROUP,
    "delete",
    help="remove a topic: its logs, configuration, table and landing records",
    example=("topic delete old-orders", "topic delete old-orders --yes"),
)
@click.argument("topic", help="the topic to remove")
@click.option("--yes", is_flag=True, help="delete (without it: print what would be removed and exit 1)")
@click.option(
    "--landing",
    metavar="DIR",
    help="landing root whose files of the topic are set aside (env COMPACTION_LANDING, default var/landing)",
)
def cmd_topic_delete(ctx: Context) -> int:
    """`topic delete TOPIC [--yes]`: what deleting the topic removes; with --yes, removed."""
    from compaction_assets.table.topic_delete import delete_topic, plan_deletion, refuse_unknown

    plan = plan_deletion(ctx.store, ctx.args.topic, str(ctx.landing), ctx.env.latest_state)
    refuse_unknown(ctx.store, plan)
    if not ctx.args.yes:
        _emit(plan.as_document())
        raise CompactionError(
            f"topic {plan.topic!r} not deleted: the above would be removed; run again with --yes to delete it"
        )
    done = delete_topic(ctx.store, plan, ctx.now)
    _progress(
        f"topic {plan.topic}: deleted ({len(plan.logs)} logs, table {plan.table or 'none'}); "
        f"{plan.landing.files_left} landing files left in place under {plan.landing.area}, set aside"
    )
    _emit(done.as_document())
    return 0
