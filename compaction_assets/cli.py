"""Operator command line: `python -m compaction_assets COMMAND ...` (or the `compaction` script).

Errors are one line on stderr and a non-zero exit; progress goes to stderr; results to stdout as JSON.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from typing import Any

from compaction_assets import settings
from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import evaluate_logs, figures
from compaction_assets.cleaning.planner import evaluate, order
from compaction_assets.errors import CompactionError, EngineError, OffsetError
from compaction_assets.log import writer
from compaction_assets.log.fs import Storage
from compaction_assets.log.config import (DEFAULTS_ENTRY, ConfigStore, TopicsFile, check_strategy_change, cleaned_logs_of,
                                          load_topics, parse_setting)
from compaction_assets.log.landing import append_files, ingest, landing_logs
from compaction_assets.log.names import check_topic, parse_log_name
from compaction_assets.log.store import LogStore, wall_ms


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _emit(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# Commands that may create a store; every other one refuses a store that does not exist (rather than
# listing it as empty).
CREATING_COMMANDS = ("append", "ingest", "config")
EXIT_PIPE_CLOSED = 141   # the reader of stdout went away; what a shell reports for a process killed by SIGPIPE
EXIT_TRANSIENT = 75   # sysexits' EX_TEMPFAIL: an engine fault (Spark down, a lost executor); running again helps


class Context:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        env = settings.current()   # here, not in the parser: a bad variable is a one-line error
        self.store = LogStore(args.store or env.store)
        self.landing = getattr(args, "landing", None) or env.landing
        if args.command not in CREATING_COMMANDS and not _store_exists(self.store):
            raise CompactionError(f"no store at {self.store.location}: it does not exist "
                                  "(--store or COMPACTION_STORE names it; `append` or `ingest` creates one)")
        self.configs = ConfigStore(self.store.storage)
        # A topics file named with --topics or COMPACTION_TOPICS is checked against the configuration stored
        # in the store, never used for one run: see ConfigStore.config_for. Nothing is read from the
        # current directory implicitly.
        self.topics_path = args.topics or env.topics_file
        self.topics: TopicsFile | None = load_topics(self.topics_path) if self.topics_path else None
        self.now = args.now if args.now is not None else wall_ms()
        self._spark = None
        self.check_topics_file()

    def check_topics_file(self) -> None:
        """Refuse, before the command reads or changes anything, a topics file that disagrees with the
        configuration stored for a topic the command touches (every command: one place for this check).
        The logs named on the command line, or every log of the store; `config` commands are how the
        stored configuration changes, so they are not checked."""
        if self.topics is None or self.args.command == "config":
            return
        names = _named_logs(self.args) or (self.store.logs() if _store_exists(self.store) else [])
        seen: set[str] = set()
        for name in names:
            topic = parse_log_name(name)[0]
            if topic not in seen:
                seen.add(topic)
                self.config(name)

    def config(self, log: str):
        topic, _ = parse_log_name(log)
        return self.configs.config_for(topic, self.topics, f"topics file {self.topics_path!r}",
                                       cleaned_logs_of(self.store), wall_ms())

    def handle(self, log: str, must_exist: bool = True):
        return self.store.log(log, must_exist=must_exist)

    @property
    def spark(self):
        if self._spark is None:
            _progress("starting Spark")
            from compaction_assets.spark import get_spark
            self._spark = get_spark()
        return self._spark


def _named_logs(args: argparse.Namespace) -> list[str]:
    """The logs a command names (LOG, or LOG...)."""
    names = [args.log] if getattr(args, "log", None) is not None else []
    return names + list(getattr(args, "logs", None) or [])


def _store_exists(store: LogStore) -> bool:
    st = store.storage
    return st.is_dir(st.root) if st.local else bool(st.list_dir(st.root))


def cmd_logs(ctx: Context) -> int:
    """`logs`: every log of the store with its size and state."""
    rows = []
    for st in evaluate_logs(ctx.store, ctx.config, ctx.now):
        ev = st.evaluation
        if ev is None:
            rows.append({"log": st.log, "error": st.error, "uncleanable": True})
            continue
        # a log marked uncleanable is not eligible: no sensor and no `clean --all` takes it
        rows.append({"log": st.log, "dirty_ratio": round(ev.dirty_ratio, 6),
                     "eligible": ev.eligible and not ev.uncleanable,
                     "reason": None if ev.uncleanable else ev.reason,
                     "why_not_eligible": ev.why_not_eligible, "max_compaction_delay_ms": ev.max_compaction_delay_ms,
                     "log_end_offset": ev.log_end_offset, "uncleanable": ev.uncleanable,
                     "uncleanable_error": (st.manifest.uncleanable or {}).get("error")})
    _emit(rows)
    return 0


def cmd_metrics(ctx: Context) -> int:
    """`metrics`: SPEC §8's figures across the store's logs."""
    _emit(figures(evaluate_logs(ctx.store, ctx.config, ctx.now)))
    return 0


def cmd_describe(ctx: Context) -> int:
    """`describe LOG`: the log's metadata and today's evaluation."""
    from compaction_assets.cleaning.describe import describe
    handle, cfg = ctx.handle(ctx.args.log), ctx.config(ctx.args.log)
    out = describe(handle, cfg, ctx.now)
    out.update(ctx.configs.describe(parse_log_name(ctx.args.log)[0]))   # the version and who set it
    _emit(out)
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
                _progress(f"{st.log}: skipped, marked uncleanable ({st.manifest.uncleanable.get('error')}); "
                          f"`clear-uncleanable {st.log}` once repaired")
            elif st.evaluation.eligible or ctx.config(st.log).delete:
                evs.append(st.evaluation)
        targets = [e.log for e in order(evs)]
    elif ctx.args.logs:
        targets = ctx.args.logs
    else:
        raise CompactionError("name one or more logs, or use --all")
    reports = []
    if targets:
        _progress(f"cleaning {len(targets)} log(s), up to {settings.current().clean_concurrency} at a time")
    items = []
    for name in targets:
        try:
            items.append((ctx.handle(name), ctx.config(name)))
        except CompactionError as exc:  # a bad name or configuration: report it, clean the others
            failed += 1
            print(f"error: {exc}", file=sys.stderr)
    engine_faults = 0
    results = engine.run_many(items, ctx.now,
                              spark=lambda: ctx.spark, force=ctx.args.force,
                              concurrency=settings.current().clean_concurrency, progress=_progress)
    for res in results:
        name, rep = res.log, res.report
        if res.error is not None:
            failed += 1
            engine_faults += isinstance(res.error, EngineError)
            print(f"error: {res.error}", file=sys.stderr)
            continue
        reports.append(rep.as_dict())
    if reports or not failed:   # stdout: what ran; a command where nothing ran says why on stderr only
        _emit(reports)
    if failed and failed == engine_faults:
        print(f"error: {engine_faults} cleaning(s) stopped by an engine fault; no log was marked, run again "
              f"once Spark is back (exit {EXIT_TRANSIENT}: transient)", file=sys.stderr)
        return EXIT_TRANSIENT
    return 1 if failed else 0


def _enc(b: bytes | None):
    """Bytes as UTF-8 text, or {"b64": ...} when they are not UTF-8 (the header-value form)."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(b).decode()}


def _bytes_field(obj: dict, name: str, b: bytes | None) -> None:
    """`name` as UTF-8 text, or `name_b64` when the bytes are not UTF-8: the form `append` reads."""
    if b is None:
        obj[name] = None
        return
    try:
        obj[name] = b.decode("utf-8")
    except UnicodeDecodeError:
        obj[f"{name}_b64"] = base64.b64encode(b).decode()


def record_json(r) -> dict:
    """One record in the JSON Lines format `append` accepts (docs/cli.md, "Record format"); the delete horizon
    is the cleaner's state, not part of the record, and is not printed."""
    obj: dict = {"offset": r.offset}
    _bytes_field(obj, "key", r.key)
    _bytes_field(obj, "value", r.value)
    obj["timestamp"] = r.timestamp
    obj["headers"] = [[n, _enc(v)] for n, v in r.headers]
    return obj


def cmd_read(ctx: Context) -> int:
    """`read LOG`: the log's visible records as JSON Lines."""
    from compaction_assets.log.reader import iter_records
    for flag, value in (("--from", ctx.args.from_offset), ("--limit", ctx.args.limit)):
        if value is not None and value < 0:
            raise CompactionError(f"{flag} {value}: must be 0 or more")
    for i, rec in enumerate(iter_records(ctx.handle(ctx.args.log), ctx.args.from_offset)):
        if ctx.args.limit is not None and i >= ctx.args.limit:
            break
        print(json.dumps(record_json(rec)))
    return 0


def cmd_latest_state(ctx: Context) -> int:
    """`latest-state LOG`: the key -> value table, printed or written as Parquet."""
    from compaction_assets.cleaning.latest_state import (fits_in_process, latest_state_df, latest_state_table,
                                                         write_latest_state)
    handle, cfg = ctx.handle(ctx.args.log), ctx.config(ctx.args.log)   # before Spark starts
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
    rows = (latest_state_table(handle, cfg, m).to_pylist() if fits_in_process(m)
            else latest_state_df(ctx.spark, handle, cfg, m).orderBy("key").toLocalIterator())
    for row in rows:
        obj: dict = {}
        _bytes_field(obj, "key", row["key"])
        _bytes_field(obj, "value", row["value"])
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
        raise CompactionError(f"--output {output}: the folder is not empty and is not an earlier latest-state "
                              "output; its files would be deleted (name an empty or new folder, or add --overwrite)")


def cmd_append(ctx: Context) -> int:
    """`append LOG FILE...`: append Parquet, JSON Lines or Avro files, all of them in one commit or none."""
    name, files = ctx.args.log, ctx.args.files
    handle, cfg = ctx.handle(name, must_exist=False), ctx.config(name)
    new_log = not handle.exists()
    try:
        done = append_files(handle, cfg, files, now=ctx.args.default_timestamp, drop_invalid=ctx.args.drop_invalid)
    except BaseException as exc:
        if new_log and not handle.exists():   # a refused first append leaves no empty log folder
            handle.st.delete(handle.dir)
        if isinstance(exc, CompactionError) and len(files) > 1:
            raise CompactionError(f"{exc}; nothing appended (none of the {len(files)} files)") from exc
        raise
    res = done.result
    _progress(f"{name}: appended {res.records} records from {len(files)} file(s) (offsets {res.first_offset}.."
              f"{res.last_offset}, {res.invalid_records} invalid dropped)")
    _emit({"log": name, "appended": res.records, "invalid_records_dropped": res.invalid_records,
           "first_offset": res.first_offset, "last_offset": res.last_offset,
           "files": [{"file": path, "records": n} for path, n in done.files],
           "log_end_offset": handle.manifest().log_end_offset})
    return 0


def cmd_ingest(ctx: Context) -> int:
    """`ingest`: ingest new files of the landing folders, each file at most once."""
    landing = Storage.open(str(ctx.landing))
    if landing.local and not landing.is_dir(landing.root):
        raise CompactionError(f"no landing area at {landing.root}: it does not exist (--landing or "
                              "COMPACTION_LANDING names it; default var/landing under the current directory)")
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
            out[name] = ingest(handle, ctx.config(name), found[name], drop_invalid=ctx.args.drop_invalid,
                               progress=_progress)
        except BaseException:
            if new_log and not handle.exists():   # a refused first ingestion leaves no empty log folder
                handle.st.delete(handle.dir)
            raise
    _emit(out)
    return 0


def cmd_set_log_start(ctx: Context) -> int:
    """`set-log-start LOG OFFSET`: move the log start offset forward (deletes records below it)."""
    handle = ctx.handle(ctx.args.log)
    m = handle.manifest()
    target = ctx.args.offset
    if target > m.log_end_offset:   # refused before saying what it would delete: it deletes nothing
        raise OffsetError(f"log {ctx.args.log}: set-log-start {target} is beyond the log end offset "
                          f"{m.log_end_offset}; nothing was deleted")
    below = [s for s in m.segments if s.base_offset < target]
    what = (f"log {ctx.args.log}: set-log-start {target} deletes offsets {m.log_start_offset}..{target - 1} "
            f"(up to {sum(s.records for s in below)} records in {len(below)} segment(s)); "
            f"they cannot be recovered")
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
        names = [st.log for st in evaluate_logs(ctx.store, ctx.config, ctx.now)
                 if st.manifest is not None and st.manifest.uncleanable]
    else:
        names = ctx.args.logs
    cleared = []
    for name in names:
        handle = ctx.handle(name)
        before = handle.manifest().uncleanable
        m = engine.clear_uncleanable(handle)
        cleared.append({"log": name, "uncleanable": m.uncleanable,
                        "error_cleared": (before or {}).get("error")})
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
    if not _store_exists(ctx.store):
        raise CompactionError(f"no store at {ctx.store.location}: it does not exist")
    topics = [ctx.args.topic] if ctx.args.topic else sorted(
        set(ctx.configs.topics()) | {parse_log_name(n)[0] for n in ctx.store.logs()})
    out = []
    for topic in topics:
        row = {"topic": topic, **ctx.configs.describe(topic)}
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
    stored = ctx.configs.set_topic(ctx.args.topic, values, "config set " + " ".join(ctx.args.settings),
                                   wall_ms(), cleaned_logs_of(ctx.store), ctx.args.confirm)
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
    if ctx.args.dry_run:   # the diff, with each change a real apply would refuse without --confirm
        changes = [c for c in ctx.configs.plan_apply(topics, known) if c.changed]
    else:
        changes = ctx.configs.apply(topics, source, wall_ms(), known, cleaned, ctx.args.confirm)
    _emit({"file": ctx.args.file, "applied": not ctx.args.dry_run,
           "defaults": (defaults.changed if topics.has_defaults else
                        "kept: the file has no `defaults` section, the store's defaults stay as they are"),
           "changes": [{"topic": c.topic, "changed": c.changed, **_needs_confirm(c, cleaned, ctx.args.confirm)}
                       for c in changes]})
    return 0


def _needs_confirm(change, cleaned, confirm: bool) -> dict:
    """{"needs_confirm": True, "refusal": why} for a change a real apply refuses without --confirm, else {}."""
    try:
        check_strategy_change(change, cleaned, confirm)
    except CompactionError as exc:
        return {"needs_confirm": True, "refusal": str(exc)}
    return {}


def _global_options(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """--store, --topics, --now: accepted before the command and after it."""
    d = {"default": argparse.SUPPRESS} if suppress else {"default": None}
    parser.add_argument("--store", help="log store root (env COMPACTION_STORE; default var/store under the current "
                        "directory)", **d)
    parser.add_argument("--topics", help="topics file to check against (and, for a topic the store has no "
                        "configuration for yet, to store); env COMPACTION_TOPICS", **d)
    parser.add_argument("--now", type=int, help="evaluate at this time (ms since epoch) instead of the clock", **d)


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: global options and one sub-command per operation."""
    p = argparse.ArgumentParser(prog="compaction", description=__doc__.splitlines()[0])
    _global_options(p, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _global_options(common, suppress=True)
    sub = p.add_subparsers(dest="command", required=True)
    _add_parser = sub.add_parser

    def add_parser(name: str, **kw) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help"))   # `COMMAND --help` says what the command does
        return _add_parser(name, parents=[common], **kw)
    sub.add_parser = add_parser   # type: ignore[method-assign]

    sub.add_parser("logs", help="list logs with their dirty ratio and eligibility").set_defaults(fn=cmd_logs)
    sub.add_parser("metrics", help="figures across logs (max-dirty-percent, uncleanable-partitions-count, "
                   "uncleanable-bytes, ...)").set_defaults(fn=cmd_metrics)
    s = sub.add_parser("describe", help="segments, ranges, sizes, checkpoint and state of a log")
    s.add_argument("log")
    s.set_defaults(fn=cmd_describe)
    s = sub.add_parser("plan", help="dry run: what a cleaning would remove and why")
    s.add_argument("logs", nargs="*", help="logs (default: all)")
    s.add_argument("--metadata-only", action="store_true", help="only the evaluation; no Spark")
    s.add_argument("--force", action="store_true",
                   help="dry-run the cleaning as if forced, even if not eligible (ignored with --metadata-only)")
    s.set_defaults(fn=cmd_plan)
    s = sub.add_parser("clean", help="clean logs (eligible ones with --all, in priority order)")
    s.add_argument("logs", nargs="*")
    s.add_argument("--all", action="store_true", help="every eligible log, highest dirty ratio first")
    s.add_argument("--force", action="store_true", help="clean even if not eligible")
    s.set_defaults(fn=cmd_clean)
    s = sub.add_parser("read", help="records from an offset, as JSON lines")
    s.add_argument("log")
    s.add_argument("--from", dest="from_offset", type=int, default=0,
                   help="first offset to read (default 0; records below the log start are gone)")
    s.add_argument("--limit", type=int, help="print at most this many records (default: all)")
    s.set_defaults(fn=cmd_read)
    s = sub.add_parser("latest-state", help="the key -> value table of a log")
    s.add_argument("log")
    s.add_argument("--output", help="write Parquet here instead of printing JSON lines")
    s.add_argument("--overwrite", action="store_true",
                   help="replace a non-empty --output folder that an earlier latest-state did not write")
    s.set_defaults(fn=cmd_latest_state)
    s = sub.add_parser("append", help="append Parquet, JSON Lines or Avro files to a log (all in one commit, "
                       "or none)")
    s.add_argument("log")
    s.add_argument("files", nargs="+", metavar="FILE", help=".parquet, .jsonl/.json/.ndjson or .avro files; "
                   "every file is validated before any is appended")
    s.add_argument("--drop-invalid", action="store_true", help="drop records with a null key and count them")
    s.add_argument("--default-timestamp", type=int, help="timestamp for records that have none")
    s.set_defaults(fn=cmd_append)
    s = sub.add_parser("set-log-start", help="move the log start offset up (deletes history below it)")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.add_argument("--confirm", action="store_true", help="delete the records below the offset")
    s.set_defaults(fn=cmd_set_log_start)
    s = sub.add_parser("roll", help="seal the active segment now, so a cleaning can take its records")
    s.add_argument("log")
    s.set_defaults(fn=cmd_roll)
    s = sub.add_parser("set-checkpoint", help="overwrite the cleaner checkpoint")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.set_defaults(fn=cmd_set_checkpoint)
    s = sub.add_parser("clear-uncleanable", help="clear the uncleanable mark once the log is repaired")
    s.add_argument("logs", nargs="*", metavar="LOG")
    s.add_argument("--all", action="store_true", help="every log marked uncleanable")
    s.set_defaults(fn=cmd_clear_uncleanable)
    s = sub.add_parser("gc", help="remove files left by interrupted changes")
    s.add_argument("log")
    s.add_argument("--grace-seconds", type=float, default=600.0,
                   help="only remove unreferenced files older than this (default %(default)s)")
    s.set_defaults(fn=cmd_gc)
    s = sub.add_parser("ingest", help="append new files from the landing area (<landing>/<topic>/partition=<p>/)")
    s.add_argument("logs", nargs="*", help="logs (default: every landing folder)")
    s.add_argument("--landing", default=None, help="landing root (env COMPACTION_LANDING, default var/landing "
                   "under the current directory); a local folder that does not exist is an error")
    s.add_argument("--drop-invalid", action="store_true", help="drop records with a null key and count them")
    s.set_defaults(fn=cmd_ingest)
    s = sub.add_parser("config", help="the topic configuration stored in the store (show, set, apply)")
    csub = s.add_subparsers(dest="config_command", required=True)
    c = csub.add_parser("show", parents=[common], help="stored configuration, version and source")
    c.add_argument("topic", nargs="?")
    c.add_argument("--history", action="store_true", help="every stored version")
    c.set_defaults(fn=cmd_config_show)
    c = csub.add_parser("set", parents=[common], help="set keys of a topic's configuration (a new version)")
    c.add_argument("topic")
    c.add_argument("settings", nargs="+", metavar="key=value")
    c.add_argument("--confirm", action="store_true", help="allow a strategy change on cleaned logs")
    c.set_defaults(fn=cmd_config_set)
    c = csub.add_parser("apply", parents=[common], help="store a topics file's configuration; prints the diff")
    c.add_argument("file")
    c.add_argument("--dry-run", action="store_true", help="print the diff, store nothing")
    c.add_argument("--confirm", action="store_true", help="allow a strategy change on cleaned logs")
    c.set_defaults(fn=cmd_config_apply)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors are one line on stderr and a non-zero exit code."""
    args = build_parser().parse_args(argv)
    try:
        for name in _named_logs(args):
            parse_log_name(name)   # names become paths: refused before anything is read or written
        if getattr(args, "topic", None) is not None:
            check_topic(args.topic, "topic")
        rc = args.fn(Context(args))
        sys.stdout.flush()   # a reader that went away (`| head`) is seen here, not at exit
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
        print(f"error: unexpected {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
              "(set COMPACTION_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


def _stdout_closed() -> int:
    """The reader of stdout went away (`read LOG | head -1`): stop quietly, as `cat` does (exit 141 = 128 +
    SIGPIPE); stdout now points at /dev/null so that Python's flush at exit finds nothing to complain about."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
