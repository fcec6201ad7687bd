"""Shell completion of log names (`compaction describe <TAB>`): the logs of the store the command line
names (--store, else COMPACTION_STORE, else var/store), as click's completion asks for them. Commands,
sub-commands and options complete without help from here (click's own completion, docs/cli.md)."""

from __future__ import annotations

import click

from compaction_assets import settings
from compaction_assets.store.log_store import LogStore


def _store_location(ctx: click.Context) -> str:
    """The store the partly typed command line names, as a command would open it."""
    current: click.Context | None = ctx
    while current is not None:
        if current.params.get("store"):
            return str(current.params["store"])
        current = current.parent
    return settings.store_location()


def store_logs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """The store's logs whose names start with what is typed; none when the store cannot be listed (a
    completion never prints an error into the operator's shell). Names, not click's CompletionItem: click
    makes the items, and its completion module stays out of every command's start."""
    try:
        # the lease's time to live is never used by a listing: given, so that no other variable is read
        store = LogStore(_store_location(ctx), lock_ttl_s=0.0)
        names = store.logs() if store.exists() else []
    except Exception:
        return []
    return [name for name in names if name.startswith(incomplete)]
