"""The command line's erasure commands: `forget` (a key's values leave the logs of its topic at once, and
its table's current rows) and `reachable` (where a key's values still are, and the time by which none is)."""

from __future__ import annotations

import click

from compaction_assets.cli import COMPACTION, NO_TABLE, command, follow
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError, InvalidInputError
from compaction_assets.segments.records import decode_base64

TOPIC = click.argument("topic")
KEYS = click.argument("keys", nargs=-1, required=True, metavar="KEY...", help="keys, as UTF-8 text (or --base64)")
BASE64 = click.option("--base64", "keys_base64", is_flag=True, help="the keys are base64 (keys that are not UTF-8)")


def keys_of(ctx: Context) -> list[bytes]:
    """The command's keys as bytes: UTF-8 text, or base64 with --base64 (one line for a bad one)."""
    if ctx.args.keys_base64:
        return [decode_base64(k, f"key {k!r}") for k in ctx.args.keys]
    return [k.encode("utf-8") for k in ctx.args.keys]


def topic_logs(ctx: Context) -> list[str]:
    """The logs of the command's topic in the store, in partition order; one line when there is none."""
    logs = sorted((n for n in ctx.store.logs() if ctx.store.log(n).topic == ctx.args.topic), key=_partition)
    if not logs:
        raise CompactionError(f"no log of topic {ctx.args.topic!r} in the store at {ctx.store.location}")
    return logs


def _partition(log: str) -> int:
    return int(log.rsplit("-", 1)[1])


def shown_key(key: bytes) -> str:
    """A key as the output names it: its UTF-8 text, else `b64:` and its base64."""
    import base64

    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return "b64:" + base64.b64encode(key).decode()


@command(
    COMPACTION,
    "forget",
    help="delete keys on request: their values leave the topic's logs at once (no offset taken)",
    example=("forget user-profiles user-42", "forget user-profiles --base64 AAEC"),
)
@TOPIC
@KEYS
@BASE64
@NO_TABLE
def cmd_forget(ctx: Context) -> int:
    """`forget TOPIC KEY...`: in each log of the topic, the key's winner becomes a tombstone in place and its
    other records are removed; then the topic's table follows."""
    from compaction_assets.log.forget import forget

    keys = keys_of(ctx)
    out: dict[str, dict[str, object]] = {}
    changed: list[str] = []
    for log in topic_logs(ctx):
        try:
            done = forget(ctx.handle(log), ctx.config(log), keys)
        except InvalidInputError:
            raise
        except CompactionError as exc:  # the logs done so far stay done; the message says which
            raise CompactionError(f"{exc} (forgotten so far in: {', '.join(changed) or 'no log'})") from exc
        if done.changed:
            changed.append(log)
            _progress(
                f"{log}: forgot {sum(k.changed for k in done.keys)} key(s), {done.files_rewritten} file(s) rewritten"
            )
        out[log] = {
            "version": done.version,
            "files_rewritten": done.files_rewritten,
            "keys": {shown_key(k.key): k.as_document() for k in done.keys},
        }
    for log, followed in follow.follow(ctx, changed).items():  # the rows leave the table's current snapshot
        out[log]["table"] = followed
    _emit({"topic": ctx.args.topic, "logs": out})
    return 0


@command(
    COMPACTION,
    "reachable",
    help="where keys' values are still reachable (logs, table, snapshots) and until when",
    example=("reachable user-profiles user-42",),
)
@TOPIC
@KEYS
@BASE64
def cmd_reachable(ctx: Context) -> int:
    """`reachable TOPIC KEY...`: per key, where a value of it still is and the time by which none is."""
    from compaction_assets.table.reading.reach import reachable

    logs = [(ctx.handle(log), ctx.config(log)) for log in topic_logs(ctx)]
    found = reachable(logs, keys_of(ctx), ctx.now)
    _emit({"topic": ctx.args.topic, "now": ctx.now, "keys": {shown_key(r.key): r.as_document() for r in found}})
    return 0
