"""What the commands that read the landing area share (`ingest` in cli/commands/writing.py, the `landing` group in
cli/commands/landing.py): the --landing option, the area's logs (a local area that does not exist refused in one
line) and each log's landing backlog. No command is declared here: the modules that declare them keep
`compaction --help`'s order."""

from __future__ import annotations

import click

from compaction_assets.cli.context import Context, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.ingest.backlog import LandingBacklog, backlogs_of
from compaction_assets.ingest.landing import landing_logs
from compaction_assets.store.fs import Storage

LANDING = click.option(
    "--landing",
    metavar="DIR",
    help="landing root (env COMPACTION_LANDING, default var/landing under the current directory); a local folder "
    "that does not exist is an error",
)


def landing_sources(ctx: Context) -> dict:
    """The landing area's logs ({log: PartitionSource}); the folders refused for their names go to stderr."""
    landing = Storage.open(str(ctx.landing))
    if landing.local and not landing.is_dir(landing.root):
        raise CompactionError(
            f"no landing area at {landing.root}: it does not exist (--landing or "
            "COMPACTION_LANDING names it; default var/landing under the current directory)"
        )
    found, refused = landing_logs(ctx.landing, ctx.store.storage)  # a deleted topic's files left out
    for reason in refused:
        _progress(f"ignored: {reason}")
    return found


def check_landed(
    ctx: Context, found: dict, logs: list[str], with_files_set_aside: frozenset[str] = frozenset()
) -> None:
    """Refuse, before anything is read or written, a named log without a landing folder (a typo) unless it
    is one of the logs `with_files_set_aside`."""
    for name in logs:
        if name not in found and name not in with_files_set_aside:
            raise CompactionError(f"no landing folder for log {name!r} under {ctx.landing}")


def backlogs(ctx: Context, found: dict, logs: list[str]) -> list[LandingBacklog]:
    """The landing backlog of each of `logs` at the command's time (nothing is written)."""
    return backlogs_of(ctx.store, found, logs, ctx.now)
