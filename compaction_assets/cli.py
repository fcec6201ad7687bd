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
from compaction_assets.errors import CompactionError
from compaction_assets.log import writer
from compaction_assets.log.config import TopicsFile, load_topics
from compaction_assets.log.landing import append_file, ingest, landing_logs
from compaction_assets.log.names import parse_log_name
from compaction_assets.log.store import LogStore, wall_ms


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _emit(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


class Context:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        env = settings.current()   # here, not in the parser: a bad variable is a one-line error
        self.store = LogStore(args.store or env.store)
        self.landing = getattr(args, "landing", None) or env.landing
        topics = args.topics or env.topics_file
        if topics is None and os.path.exists("topics.yaml"):
            topics = "topics.yaml"
        self.topics: TopicsFile = load_topics(topics)
        self.now = args.now if args.now is not None else wall_ms()
        self._spark = None

    def config(self, log: str):
        topic, _ = parse_log_name(log)
        return self.topics.config_for(topic)

    def handle(self, log: str, must_exist: bool = True):
        return self.store.log(log, must_exist=must_exist)

    @property
    def spark(self):
        if self._spark is None:
            _progress("starting Spark")
            from compaction_assets.spark import get_spark
            self._spark = get_spark()
        return self._spark


def cmd_logs(ctx: Context) -> int:
    """`logs`: every log of the store with its size and state."""
    rows = []
    for st in evaluate_logs(ctx.store, ctx.config, ctx.now):
        ev = st.evaluation
        if ev is None:
            rows.append({"log": st.log, "error": st.error, "uncleanable": True})
            continue
        rows.append({"log": st.log, "dirty_ratio": round(ev.dirty_ratio, 6), "eligible": ev.eligible,
                     "reason": ev.reason, "max_compaction_delay_ms": ev.max_compaction_delay_ms,
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
    _emit(describe(ctx.handle(ctx.args.log), ctx.config(ctx.args.log), ctx.now))
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
    results = engine.run_many(items, ctx.now,
                              spark=lambda: ctx.spark, force=ctx.args.force,
                              concurrency=settings.current().clean_concurrency, progress=_progress)
    for res in results:
        name, rep = res.log, res.report
        if res.error is not None:
            failed += 1
            print(f"error: {res.error}", file=sys.stderr)
            continue
        if rep.cleaned:
            s = rep.stats
            _progress(f"{name}: cleaned ({rep.reason}) {s['records_read']} -> {s['records_written']} records "
                      f"in {s['clean_time_secs']:.1f}s")
        else:
            _progress(f"{name}: not eligible, nothing cleaned")
        reports.append(rep.as_dict())
    _emit(reports)
    return 1 if failed else 0


def _enc(b: bytes | None):
    """Bytes as UTF-8 text, or {"b64": ...} when they are not UTF-8."""
    if b is None:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(b).decode()}


def _record_json(r) -> dict:
    return {"offset": r.offset, "key": _enc(r.key), "value": _enc(r.value), "timestamp": r.timestamp,
            "headers": [[n, _enc(v)] for n, v in r.headers], "delete_horizon": r.delete_horizon}


def cmd_read(ctx: Context) -> int:
    """`read LOG`: the log's visible records as JSON Lines."""
    from compaction_assets.log.reader import iter_records
    for i, rec in enumerate(iter_records(ctx.handle(ctx.args.log), ctx.args.from_offset)):
        if ctx.args.limit is not None and i >= ctx.args.limit:
            break
        print(json.dumps(_record_json(rec)))
    return 0


def cmd_latest_state(ctx: Context) -> int:
    """`latest-state LOG`: the key -> value table, printed or written as Parquet."""
    from compaction_assets.cleaning.latest_state import latest_state_df
    df = latest_state_df(ctx.spark, ctx.handle(ctx.args.log), ctx.config(ctx.args.log))
    if ctx.args.output:
        df.write.mode("overwrite").parquet(ctx.args.output)
        _progress(f"wrote the latest state to {ctx.args.output}")
        return 0
    for row in df.orderBy("key").toLocalIterator():
        print(json.dumps({"key": _enc(row["key"]), "value": _enc(row["value"]), "offset": row["offset"]}))
    return 0


def cmd_append(ctx: Context) -> int:
    """`append LOG FILE`: append a Parquet or JSON Lines file."""
    name = ctx.args.log
    handle, cfg = ctx.handle(name, must_exist=False), ctx.config(name)
    total = 0
    for path in ctx.args.files:
        res = append_file(handle, cfg, path, now=ctx.args.default_timestamp, drop_invalid=ctx.args.drop_invalid)
        total += res.records
        _progress(f"{name}: appended {res.records} records from {path} (offsets {res.first_offset}.."
                  f"{res.last_offset}, {res.invalid_records} invalid dropped)")
    _emit({"log": name, "appended": total, "log_end_offset": handle.manifest().log_end_offset})
    return 0


def cmd_ingest(ctx: Context) -> int:
    """`ingest`: ingest new files of the landing folders, each file at most once."""
    found, refused = landing_logs(ctx.landing)
    for reason in refused:
        _progress(f"ignored: {reason}")
    out = {}
    for name in ctx.args.logs or sorted(found):
        if name not in found:
            raise CompactionError(f"no landing folder for log {name!r} under {ctx.landing}")
        out[name] = ingest(ctx.handle(name, must_exist=False), ctx.config(name), found[name],
                           drop_invalid=ctx.args.drop_invalid, progress=_progress)
    _emit(out)
    return 0


def cmd_set_log_start(ctx: Context) -> int:
    """`set-log-start LOG OFFSET`: move the log start offset forward (deletes records below it)."""
    m = writer.set_log_start(ctx.handle(ctx.args.log), ctx.args.offset)
    _emit({"log": ctx.args.log, "log_start_offset": m.log_start_offset})
    return 0


def cmd_set_checkpoint(ctx: Context) -> int:
    """`set-checkpoint LOG OFFSET`: overwrite the cleaner checkpoint."""
    m = writer.set_checkpoint(ctx.handle(ctx.args.log), ctx.args.offset)
    _emit({"log": ctx.args.log, "checkpoint": m.checkpoint})
    return 0


def cmd_clear_uncleanable(ctx: Context) -> int:
    """`clear-uncleanable LOG`: clear a failed cleaning's mark."""
    m = engine.clear_uncleanable(ctx.handle(ctx.args.log))
    _emit({"log": ctx.args.log, "uncleanable": m.uncleanable})
    return 0


def cmd_gc(ctx: Context) -> int:
    """`gc`: collect files no manifest references, after the grace period."""
    handle = ctx.handle(ctx.args.log)
    with handle.lock("clean", purpose="garbage collection"):
        removed = handle.collect_garbage(ctx.args.grace_seconds)
    _emit({"log": ctx.args.log, "removed_files": len(removed)})
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser: global options and one sub-command per operation."""
    p = argparse.ArgumentParser(prog="compaction", description=__doc__.splitlines()[0])
    p.add_argument("--store", default=None,
                   help="log store root (env COMPACTION_STORE; default var/store)")
    p.add_argument("--topics", help="topics file (env COMPACTION_TOPICS; default ./topics.yaml if present)")
    p.add_argument("--now", type=int, help="evaluate at this time (ms since epoch) instead of the clock")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("logs", help="list logs with their dirty ratio and eligibility").set_defaults(fn=cmd_logs)
    sub.add_parser("metrics", help="figures across logs (max-dirty-percent, uncleanable-partitions-count, "
                   "uncleanable-bytes, ...)").set_defaults(fn=cmd_metrics)
    s = sub.add_parser("describe", help="segments, ranges, sizes, checkpoint and state of a log")
    s.add_argument("log")
    s.set_defaults(fn=cmd_describe)
    s = sub.add_parser("plan", help="dry run: what a cleaning would remove and why")
    s.add_argument("logs", nargs="*", help="logs (default: all)")
    s.add_argument("--metadata-only", action="store_true", help="only the evaluation; no Spark")
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=cmd_plan)
    s = sub.add_parser("clean", help="clean logs (eligible ones with --all, in priority order)")
    s.add_argument("logs", nargs="*")
    s.add_argument("--all", action="store_true", help="every eligible log, highest dirty ratio first")
    s.add_argument("--force", action="store_true", help="clean even if not eligible")
    s.set_defaults(fn=cmd_clean)
    s = sub.add_parser("read", help="records from an offset, as JSON lines")
    s.add_argument("log")
    s.add_argument("--from", dest="from_offset", type=int, default=0)
    s.add_argument("--limit", type=int)
    s.set_defaults(fn=cmd_read)
    s = sub.add_parser("latest-state", help="the key -> value table of a log")
    s.add_argument("log")
    s.add_argument("--output", help="write Parquet here instead of printing JSON lines")
    s.set_defaults(fn=cmd_latest_state)
    s = sub.add_parser("append", help="append Parquet or JSON Lines files to a log")
    s.add_argument("log")
    s.add_argument("files", nargs="+")
    s.add_argument("--drop-invalid", action="store_true", help="drop records with a null key and count them")
    s.add_argument("--default-timestamp", type=int, help="timestamp for records that have none")
    s.set_defaults(fn=cmd_append)
    s = sub.add_parser("set-log-start", help="move the log start offset up (deletes history below it)")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.set_defaults(fn=cmd_set_log_start)
    s = sub.add_parser("set-checkpoint", help="overwrite the cleaner checkpoint")
    s.add_argument("log")
    s.add_argument("offset", type=int)
    s.set_defaults(fn=cmd_set_checkpoint)
    s = sub.add_parser("clear-uncleanable", help="clear the uncleanable mark once the log is repaired")
    s.add_argument("log")
    s.set_defaults(fn=cmd_clear_uncleanable)
    s = sub.add_parser("gc", help="remove files left by interrupted changes")
    s.add_argument("log")
    s.add_argument("--grace-seconds", type=float, default=600.0)
    s.set_defaults(fn=cmd_gc)
    s = sub.add_parser("ingest", help="append new files from the landing area (<landing>/<topic>/partition=<p>/)")
    s.add_argument("logs", nargs="*", help="logs (default: every landing folder)")
    s.add_argument("--landing", default=None, help="landing root (env COMPACTION_LANDING, default var/landing)")
    s.add_argument("--drop-invalid", action="store_true")
    s.set_defaults(fn=cmd_ingest)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors are one line on stderr and a non-zero exit code."""
    args = build_parser().parse_args(argv)
    try:
        names = [args.log] if getattr(args, "log", None) is not None else []
        for name in names + list(getattr(args, "logs", None) or []):
            parse_log_name(name)   # names become paths: refused before anything is read or written
        return args.fn(Context(args))
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


if __name__ == "__main__":
    sys.exit(main())
