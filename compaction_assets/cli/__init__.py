"""Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).

Errors are one line on stderr and a non-zero exit; progress goes to stderr; results to stdout as JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from types import ModuleType

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import LogState, evaluate_logs, figures
from compaction_assets.cli import config, maintenance, records, table
from compaction_assets.cli.context import EXIT_PIPE_CLOSED, EXIT_TRANSIENT, Context, _emit, _progress, settle_imports
from compaction_assets.cli.parser import command_parser
from compaction_assets.errors import CompactionError, EngineError, first_line
from compaction_assets.ingest.landing import append_files, ingest, landing_logs
from compaction_assets.planning.planner import evaluate, order
from compaction_assets.store.fs import Storage
from compaction_assets.store.names import parse_log_name

# The modules that hold the other commands' `cmd_` functions (this one holds the reading ones, `append`
# and `ingest`): the parser maps each command to its function by that name.
COMMAND_MODULES: tuple[ModuleType, ...] = (records, maintenance, config, table)


def cmd_logs(ctx: Context) -> int:
    """`logs`: every log of the store with its size and state."""
    rows: list[dict[str, object]] = []
    states = evaluate_logs(ctx.store, ctx.config, ctx.now)
    read = {st.log: st.manifest for st in states if st.manifest is not None}
    lags = table.lag(ctx, list(read), read)
    for st in states:
        ev = st.evaluation
        if ev is None:
            rows.append({"log": st.log, "error": st.error, "uncleanable": True})
            continue
        # a log marked uncleanable is not eligible: no sensor and no `clean --all` takes it
        rows.append(
            {
                "log": st.log,
                "dirty_ratio": round(ev.dirty_ratio, 6),
                "eligible": ev.eligible and not ev.uncleanable,
                "reason": None if ev.uncleanable else ev.reason,
                "why_not_eligible": ev.why_not_eligible,
                "max_compaction_delay_ms": ev.max_compaction_delay_ms,
                "log_end_offset": ev.log_end_offset,
                "uncleanable": ev.uncleanable,
                "uncleanable_error": _uncleanable_error(st),
                **_lag_columns(lags.get(st.log)),
            }
        )
    _emit(rows)
    return 0


def _lag_columns(lag: dict[str, object] | None) -> dict[str, object]:
    """The table lag's columns of a `logs` row (none when tables are off)."""
    if lag is None:
        return {}
    if "error" in lag:
        return {"table_lag_error": lag["error"]}
    return {"table_lag_records": lag["lag_records"], "table_lag_ms": lag["lag_ms"], "table_late": lag["late"]}


def _uncleanable_error(st: LogState) -> str | None:
    """The error of the failed cleaning that marked the log uncleanable (None: not marked, or unread)."""
    mark = st.manifest.uncleanable if st.manifest is not None else None
    return mark.error if mark else None


def cmd_metrics(ctx: Context) -> int:
    """`metrics`: SPEC §8's figures across the store's logs."""
    _emit(figures(evaluate_logs(ctx.store, ctx.config, ctx.now)).as_dict())
    return 0


def cmd_describe(ctx: Context) -> int:
    """`describe LOG`: the log's metadata and today's evaluation."""
    from compaction_assets.planning.describe import describe

    handle, cfg = ctx.handle(ctx.args.log), ctx.config(ctx.args.log)
    # the stored configuration, its version and who set it replace the configuration the description used
    _emit(
        {
            **describe(handle, cfg, ctx.now).as_document(),
            **ctx.configs.describe(parse_log_name(ctx.args.log)[0]).as_document(),
            "table": table.lag(ctx, [ctx.args.log]).get(ctx.args.log, {"skipped": "tables are off"}),
        }
    )
    return 0


def cmd_plan(ctx: Context) -> int:
    """`plan [LOG...]`: the evaluation and, unless --metadata-only, a dry run of the cleaning."""
    logs = ctx.args.logs or ctx.store.logs()
    out = []
    for name in logs:
        handle, cfg = ctx.handle(name), ctx.config(name)
        if ctx.args.metadata_only:
            out.append(evaluate(handle.manifest(), cfg, ctx.now).as_dict())
        else:
            _progress(f"{name}: dry run")
            out.append(engine.dry_run(handle, cfg, ctx.now, spark=ctx.spark, force=ctx.args.force).as_dict())
    _emit(out)
    return 0


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
    reports, engine_faults = {}, 0
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
    # the cleaned logs' tables follow them (a cleaning changes the version; retention deletes records)
    for log, followed in table.follow(ctx, list(reports)).items():
        reports[log]["table"] = followed
    if reports or not failed:  # stdout: what ran; a command where nothing ran says why on stderr only
        _emit(list(reports.values()))
    if failed and failed == engine_faults:
        print(
            f"error: {engine_faults} cleaning(s) stopped by an engine fault; no log was marked, run again "
            f"once Spark is back (exit {EXIT_TRANSIENT}: transient)",
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


def cmd_append(ctx: Context) -> int:
    """`append LOG FILE...`: append Parquet, JSON Lines or Avro files, all of them in one commit or none."""
    name, files = ctx.args.log, ctx.args.files
    handle, cfg = ctx.handle(name, must_exist=False), ctx.config(name)
    new_log = not handle.exists()
    try:
        done = append_files(handle, cfg, files, now=ctx.args.default_timestamp, drop_invalid=ctx.args.drop_invalid)
    except BaseException as exc:
        if new_log and not handle.exists():  # a refused first append leaves no empty log folder
            handle.st.delete(handle.dir)
        if isinstance(exc, CompactionError) and len(files) > 1:
            raise CompactionError(f"{exc}; nothing appended (none of the {len(files)} files)") from exc
        raise
    res = done.result
    _progress(
        f"{name}: appended {res.records} records from {len(files)} file(s) (offsets {res.first_offset}.."
        f"{res.last_offset}, {res.invalid_records} invalid dropped)"
    )
    _emit(
        {
            "log": name,
            "appended": res.records,
            "invalid_records_dropped": res.invalid_records,
            "first_offset": res.first_offset,
            "last_offset": res.last_offset,
            "files": [{"file": path, "records": n} for path, n in done.files],
            "log_end_offset": handle.manifest().log_end_offset,
            "table": table.follow(ctx, [name])[name],  # the topic's table follows the log, before returning
        }
    )
    return 0


def cmd_ingest(ctx: Context) -> int:
    """`ingest`: ingest new files of the landing folders, each file at most once."""
    landing = Storage.open(str(ctx.landing))
    if landing.local and not landing.is_dir(landing.root):
        raise CompactionError(
            f"no landing area at {landing.root}: it does not exist (--landing or "
            "COMPACTION_LANDING names it; default var/landing under the current directory)"
        )
    found, refused = landing_logs(ctx.landing)
    for reason in refused:
        _progress(f"ignored: {reason}")
    out = {}
    for name in ctx.args.logs or sorted(found):
        if name not in found:
            raise CompactionError(f"no landing folder for log {name!r} under {ctx.landing}")
        handle = ctx.handle(name, must_exist=False)
        new_log = not handle.exists()
        try:
            out[name] = ingest(
                handle, ctx.config(name), found[name], drop_invalid=ctx.args.drop_invalid, progress=_progress
            ).as_document()
        except BaseException:
            if new_log and not handle.exists():  # a refused first ingestion leaves no empty log folder
                handle.st.delete(handle.dir)
            raise
    for name, followed in table.follow(ctx, list(out)).items():  # the topics' tables follow, one snapshot each
        out[name]["table"] = followed
    _emit(out)
    return 0


def _commands() -> dict[str, Callable[[Context], int]]:
    """Every `cmd_` function, of this module and of the command modules, by name."""
    namespaces = [globals(), *(vars(module) for module in COMMAND_MODULES)]
    return {name: value for namespace in namespaces for name, value in namespace.items() if name.startswith("cmd_")}


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser, each command mapped to its function."""
    return command_parser(_commands(), (__doc__ or "").splitlines()[0])


def main(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    """Run one command (parsed by `parser`, the CLI's own unless given); errors are one line on stderr
    and a non-zero exit code."""
    args = (parser or build_parser()).parse_args(argv)
    try:
        rc = args.fn(Context(args))
        sys.stdout.flush()  # a reader that went away (`| head`) is seen here, not at exit
        return rc
    except BrokenPipeError:
        return _stdout_closed()
    except EngineError as exc:
        print(f"error: {exc} (exit {EXIT_TRANSIENT}: transient, run again)", file=sys.stderr)
        return EXIT_TRANSIENT
    except CompactionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # never a bare traceback for operators; details with COMPACTION_DEBUG=1
        if settings.debug_enabled():
            raise
        print(
            f"error: unexpected {type(exc).__name__}: {first_line(exc, None, blank='')} "
            "(set COMPACTION_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> int:
    """The `compaction` command's process: its imports settled (cli/context.settle_imports), then `main`."""
    settle_imports()
    return main()


def _stdout_closed() -> int:
    """The reader of stdout went away (`read LOG | head -1`): stop quietly, as `cat` does (exit 141 = 128 +
    SIGPIPE); stdout now points at /dev/null so that Python's flush at exit finds nothing to complain about."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(run())
