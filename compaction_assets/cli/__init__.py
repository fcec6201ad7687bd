"""Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).

Errors are one line on stderr and a non-zero exit; progress goes to stderr; results to stdout as JSON.
"""

from __future__ import annotations

import argparse
import os
import sys

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import evaluate_logs, figures
from compaction_assets.cli.context import EXIT_PIPE_CLOSED, EXIT_TRANSIENT, Context, _emit, _progress, settle_imports
from compaction_assets.cli.context import build_parser as _build_parser
from compaction_assets.cli.records import cmd_latest_state, cmd_read
from compaction_assets.cli.table import cmd_table_commit, cmd_table_history, cmd_table_scan, cmd_table_show  # noqa: F401
from compaction_assets.errors import CompactionError, EngineError, OffsetError
from compaction_assets.ingest.landing import append_files, ingest, landing_logs
from compaction_assets.log import writer
from compaction_assets.planning.planner import evaluate, order
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import wall_ms
from compaction_assets.store.names import parse_log_name
from compaction_assets.topics.config import load_topics
from compaction_assets.topics.config_store import DEFAULTS_ENTRY, check_strategy_change, cleaned_logs_of, parse_setting


def cmd_logs(ctx: Context) -> int:
    """`logs`: every log of the store with its size and state."""
    rows = []
    for st in evaluate_logs(ctx.store, ctx.config, ctx.now):
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
                "uncleanable_error": st.manifest.uncleanable.error if st.manifest.uncleanable else None,
            }
        )
    _emit(rows)
    return 0


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
    failed = 0
    if ctx.args.all:
        evs = []
        for st in evaluate_logs(ctx.store, ctx.config, ctx.now):
            if st.evaluation is None:  # unreadable: report it, clean the others
                failed += 1
                print(f"error: {st.error}", file=sys.stderr)
            elif st.evaluation.uncleanable:
                _progress(
                    f"{st.log}: skipped, marked uncleanable ({st.manifest.uncleanable.error}); "
                    f"`clear-uncleanable {st.log}` once repaired"
                )
            elif st.evaluation.eligible or ctx.config(st.log).delete:
                evs.append(st.evaluation)
        targets = [e.log for e in order(evs)]
    elif ctx.args.logs:
        targets = ctx.args.logs
    else:
        raise CompactionError("name one or more logs, or use --all")
    reports = []
    if targets:
        _progress(f"cleaning {len(targets)} log(s), up to {ctx.env.clean_concurrency} at a time")
    items = []
    for name in targets:
        try:
            items.append((ctx.handle(name), ctx.config(name)))
        except CompactionError as exc:  # a bad name or configuration: report it, clean the others
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    engine_faults = 0
    results = engine.run_many(
        items, ctx.now, force=ctx.args.force, concurrency=ctx.env.clean_concurrency, progress=ctx.progress
    )  # the engine starts Spark once a cleaning is due
    for res in results:
        name, rep = res.log, res.report
        if res.error is not None:
            failed += 1
            engine_faults += isinstance(res.error, EngineError)
            print(f"error: {res.error}", file=sys.stderr)
            continue
        reports.append(rep.as_dict())
    if reports or not failed:  # stdout: what ran; a command where nothing ran says why on stderr only
        _emit(reports)
    if failed and failed == engine_faults:
        print(
            f"error: {engine_faults} cleaning(s) stopped by an engine fault; no log was marked, run again "
            f"once Spark is back (exit {EXIT_TRANSIENT}: transient)",
            file=sys.stderr,
        )
        return EXIT_TRANSIENT
    return 1 if failed else 0


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
    _emit(out)
    return 0


def cmd_set_log_start(ctx: Context) -> int:
    """`set-log-start LOG OFFSET`: move the log start offset forward (deletes records below it)."""
    handle = ctx.handle(ctx.args.log)
    m = handle.manifest()
    target = ctx.args.offset
    if target > m.log_end_offset:  # refused before saying what it would delete: it deletes nothing
        raise OffsetError(
            f"log {ctx.args.log}: set-log-start {target} is beyond the log end offset "
            f"{m.log_end_offset}; nothing was deleted"
        )
    below = [s for s in m.segments if s.base_offset < target]
    what = (
        f"log {ctx.args.log}: set-log-start {target} deletes offsets {m.log_start_offset}..{target - 1} "
        f"(up to {sum(s.records for s in below)} records in {len(below)} segment(s)); "
        f"they cannot be recovered"
    )
    if target <= m.log_start_offset:
        what = f"log {ctx.args.log}: log start is already {m.log_start_offset}; nothing below {target} to delete"
    if not ctx.args.confirm:
        raise CompactionError(f"{what}; repeat with --confirm to do it")
    _progress(what)
    m = writer.set_log_start(handle, target)
    _emit({"log": ctx.args.log, "log_start_offset": m.log_start_offset})
    return 0


def cmd_roll(ctx: Context) -> int:
    """`roll LOG`: seal the active segment now (the cleaner never touches the active segment)."""
    handle = ctx.handle(ctx.args.log)
    with handle.lock("append", purpose="roll"):
        m = writer.roll(handle)
    _emit({"log": ctx.args.log, "segments": len(m.segments), "active_segment_base_offset": m.active.base_offset})
    return 0


def cmd_set_checkpoint(ctx: Context) -> int:
    """`set-checkpoint LOG OFFSET`: overwrite the cleaner checkpoint."""
    m = writer.set_checkpoint(ctx.handle(ctx.args.log), ctx.args.offset)
    _emit({"log": ctx.args.log, "checkpoint": m.checkpoint})
    return 0


def cmd_clear_uncleanable(ctx: Context) -> int:
    """`clear-uncleanable LOG... | --all`: clear failed cleanings' marks (--all: every marked log)."""
    if ctx.args.all == bool(ctx.args.logs):
        raise CompactionError("name one or more logs, or use --all (every log marked uncleanable)")
    if ctx.args.all:
        names = [
            st.log
            for st in evaluate_logs(ctx.store, ctx.config, ctx.now)
            if st.manifest is not None and st.manifest.uncleanable
        ]
    else:
        names = ctx.args.logs
    cleared = []
    for name in names:
        handle = ctx.handle(name)
        before = handle.manifest().uncleanable
        m = engine.clear_uncleanable(handle)
        cleared.append(
            {
                "log": name,
                "uncleanable": None if m.uncleanable is None else m.uncleanable.to_json(),
                "error_cleared": before.error if before else None,
            }
        )
        _progress(f"{name}: " + ("mark cleared" if before else "was not marked"))
    _emit(cleared[0] if len(ctx.args.logs) == 1 else cleared)
    return 0


def cmd_gc(ctx: Context) -> int:
    """`gc`: collect files no manifest references, after the grace period."""
    handle = ctx.handle(ctx.args.log)
    with handle.lock("clean", purpose="garbage collection"):
        removed = handle.collect_garbage(ctx.args.grace_seconds)
    _emit({"log": ctx.args.log, "removed_files": len(removed)})
    return 0


def cmd_config_show(ctx: Context) -> int:
    """`config show [TOPIC] [--history]`: the stored configuration, its version and who changed it."""
    if not ctx.store.exists():
        raise CompactionError(f"no store at {ctx.store.location}: it does not exist")
    topics = (
        [ctx.args.topic]
        if ctx.args.topic
        else sorted(set(ctx.configs.topics()) | {parse_log_name(n)[0] for n in ctx.store.logs()})
    )
    out = []
    for topic in topics:
        row = {"topic": topic, **ctx.configs.describe(topic).as_document()}
        if ctx.args.history:
            row["history"] = [c.as_dict() for c in ctx.configs.history(topic)]
        out.append(row)
    if not ctx.args.topic:
        defaults = ctx.configs.current(DEFAULTS_ENTRY)
        out.insert(0, {"defaults": defaults.as_dict() if defaults else None})
    _emit(out)
    return 0


def cmd_config_set(ctx: Context) -> int:
    """`config set TOPIC key=value ...`: store a new version of a topic's configuration."""
    values = dict(parse_setting(a) for a in ctx.args.settings)
    change = ctx.configs.plan_set(ctx.args.topic, values)
    before = ctx.configs.current(ctx.args.topic)
    stored = ctx.configs.set_topic(
        ctx.args.topic,
        values,
        "config set " + " ".join(ctx.args.settings),
        wall_ms(),
        cleaned_logs_of(ctx.store),
        ctx.args.confirm,
    )
    new_version = before is None or stored.version != before.version
    if not new_version:
        _progress(f"topic {ctx.args.topic}: nothing changes; no new version stored")
    _emit({"topic": ctx.args.topic, "version": stored.version, "changed": change.changed, "stored": new_version})
    return 0


def cmd_config_apply(ctx: Context) -> int:
    """`config apply TOPICS_FILE`: store a topics file's configuration; prints what changed."""
    topics = load_topics(ctx.args.file)
    known = sorted({parse_log_name(n)[0] for n in ctx.store.logs()})
    source = f"config apply {os.path.abspath(ctx.args.file)}"
    defaults = ctx.configs.plan_defaults(topics)
    cleaned = cleaned_logs_of(ctx.store)
    if ctx.args.dry_run:  # the diff, with each change a real apply would refuse without --confirm
        changes = [c for c in ctx.configs.plan_apply(topics, known) if c.changed]
    else:
        changes = ctx.configs.apply(topics, source, wall_ms(), known, cleaned, ctx.args.confirm)
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


def _needs_confirm(change, cleaned, confirm: bool) -> dict:
    """{"needs_confirm": True, "refusal": why} for a change a real apply refuses without --confirm, else {}."""
    try:
        check_strategy_change(change, cleaned, confirm)
    except CompactionError as exc:
        return {"needs_confirm": True, "refusal": str(exc)}
    return {}


def build_parser():
    """The command line's parser, each command mapped to its function here."""
    # every `cmd_` function of this module, those imported from cli_records.py included
    commands = {name: value for name, value in globals().items() if name.startswith("cmd_")}
    return _build_parser(commands, __doc__.splitlines()[0])


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
            f"error: unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
            "(set COMPACTION_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return 1


def run() -> int:
    """The `compaction` command's process: its imports settled (cli_context.settle_imports), then `main`."""
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
