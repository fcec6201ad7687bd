"""The command line's `clean`: the cleanings that are due (or forced) of the named logs or, with --all, of
every eligible log in priority order, in one Spark session; its exit code tells a log's failure (1) from an
engine fault (75, transient)."""

from __future__ import annotations

import sys

import click

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import evaluate_logs
from compaction_assets.cli import COMPACTION, NO_TABLE, command, follow
from compaction_assets.cli.commands.reading import _uncleanable_error
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import EXIT_TRANSIENT, Context, _emit, _progress
from compaction_assets.errors import CompactionError, EngineError
from compaction_assets.planning.planner import order


@command(
    COMPACTION,
    "clean",
    help="clean logs (eligible ones with --all, in priority order)",
    example=("clean --all", "clean user-profiles-0 --force"),
)
@click.argument("logs", nargs=-1, metavar="[LOG]...", shell_complete=store_logs)
@click.option("--all", is_flag=True, help="every eligible log, highest dirty ratio first")
@click.option("--force", is_flag=True, help="clean even if not eligible")
@NO_TABLE
def cmd_clean(ctx: Context) -> int:
    """`clean LOG... | --all`: run the cleanings that are due (or forced)."""
    targets, failed = _clean_targets(ctx)
    if targets:
        _progress(f"cleaning {len(targets)} log(s), up to {ctx.env.clean_concurrency} at a time")
    items = []
    for name in targets:
        try:
            items.append((ctx.handle(name), ctx.config(name)))
        except CompactionError as exc:  # a bad name or configuration: report it, clean the others
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    reports: dict[str, dict] = {}
    engine_faults = 0
    results = engine.run_many(
        items, ctx.now, force=ctx.args.force, concurrency=ctx.env.clean_concurrency, progress=ctx.progress
    )  # the engine starts Spark once a cleaning is due
    for res in results:
        if res.error is not None:
            failed += 1
            engine_faults += isinstance(res.error, EngineError)
            print(f"error: {res.error}", file=sys.stderr)
            continue
        assert res.report is not None  # a fleet's result holds its report or its error
        reports[res.log] = res.report.as_dict()
    # the cleaned logs' tables follow them (a cleaning changes the version; retention deletes records);
    # with the tables off there is nothing to commit, and the table's follow is not entered
    if ctx.tables_follow:
        for log, followed in follow.follow(ctx, list(reports)).items():
            reports[log]["table"] = followed
    else:
        for report in reports.values():
            report["table"] = dict(follow.TABLES_OFF)
    if reports or not failed:  # stdout: what ran; a command where nothing ran says why on stderr only
        _emit(list(reports.values()))
    if failed and failed == engine_faults:
        print(
            f"error: {engine_faults} cleaning(s) stopped by an engine fault (Spark's or the machine's, said "
            f"above); no log was marked, run again once it is fixed (exit {EXIT_TRANSIENT}: transient)",
            file=sys.stderr,
        )
        return EXIT_TRANSIENT
    return 1 if failed else 0


def _clean_targets(ctx: Context) -> tuple[list[str], int]:
    """The logs `clean` takes, in order (--all: the eligible ones, highest priority first), and how many
    logs it could not even evaluate (each reported on stderr)."""
    if not ctx.args.all:
        if not ctx.args.logs:
            raise CompactionError("name one or more logs, or use --all")
        return ctx.args.logs, 0
    failed, evs = 0, []
    for st in evaluate_logs(ctx.store, ctx.config, ctx.now):
        if st.evaluation is None:  # unreadable: report it, clean the others
            failed += 1
            print(f"error: {st.error}", file=sys.stderr)
        elif st.evaluation.uncleanable:
            _progress(
                f"{st.log}: skipped, marked uncleanable ({_uncleanable_error(st)}); "
                f"`clear-uncleanable {st.log}` once repaired"
            )
        elif st.evaluation.eligible or ctx.config(st.log).delete:
            evs.append(st.evaluation)
    return [e.log for e in order(evs)], failed
