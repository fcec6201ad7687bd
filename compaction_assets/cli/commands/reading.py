"""The command line's commands that read the store: `logs`, `metrics` (and `metrics serve`, its Prometheus
endpoint), `describe` and `plan` (the evaluation, and a dry run of the cleaning)."""

from __future__ import annotations

import sys

import click

from compaction_assets.cleaning import engine
from compaction_assets.cleaning.metrics import LogState, evaluate_logs, figures
from compaction_assets.cli import COMPACTION, command, follow, runnable_group
from compaction_assets.cli.completion import store_logs
from compaction_assets.cli.context import Context, _emit, _progress
from compaction_assets.errors import CompactionError
from compaction_assets.planning.planner import evaluate
from compaction_assets.store.names import parse_log_name


@command(
    COMPACTION, "logs", help="list logs with their dirty ratio and eligibility", example=("logs", "logs --table-lag")
)
@click.option(
    "--table-lag",
    is_flag=True,
    help="also each log's table lag (records and ms behind the log; opens the topics' tables)",
)
def cmd_logs(ctx: Context) -> int:
    """`logs`: every log of the store with its size and state (`--table-lag`: and its table's lag)."""
    rows: list[dict[str, object]] = []
    states = evaluate_logs(ctx.store, ctx.config, ctx.now)
    read = {st.log: st.manifest for st in states if st.manifest is not None}
    # the lag opens the topics' tables (pyiceberg's import and the catalog): asked for, not paid by every `logs`
    lags = follow.lag(ctx, list(read), read) if ctx.args.table_lag else {}
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
    """The table lag's columns of a `logs` row (none when not asked for or tables are off)."""
    if lag is None:
        return {}
    if "error" in lag:
        return {"table_lag_error": lag["error"]}
    return {"table_lag_records": lag["lag_records"], "table_lag_ms": lag["lag_ms"], "table_late": lag["late"]}


def _uncleanable_error(st: LogState) -> str | None:
    """The error of the failed cleaning that marked the log uncleanable (None: not marked, or unread)."""
    mark = st.manifest.uncleanable if st.manifest is not None else None
    return mark.error if mark else None


@click.option(
    "--format",
    "output_format",
    type=click.Choice(["json", "prometheus"]),
    default="json",
    help="json: the figures across logs; prometheus: those and each log's table lag and landing backlog, as "
    "Prometheus text (docs/monitoring.md)",
)
def cmd_metrics(ctx: Context) -> int:
    """`metrics [--format json|prometheus]`: SPEC §8's figures across the store's logs (as Prometheus text:
    with each log's table lag and landing backlog)."""
    if ctx.args.output_format == "prometheus":
        from prometheus_client import generate_latest

        from compaction_assets.cli.prometheus import read_store, registry_of

        sys.stdout.write(generate_latest(registry_of(lambda: (read_store(ctx, ctx.now), ctx.now))).decode())
        return 0
    _emit(figures(evaluate_logs(ctx.store, ctx.config, ctx.now)).as_dict())
    return 0


METRICS = runnable_group(
    COMPACTION,
    "metrics",
    help="figures across logs (max-dirty-percent, uncleanable-partitions-count, uncleanable-bytes, ...)",
    example=("metrics", "metrics --format prometheus"),
)(cmd_metrics)


@command(
    METRICS,
    "serve",
    help="serve the metrics as Prometheus text over HTTP, read again at every scrape",
    example=("metrics serve --port 9464",),
)
@click.option("--port", type=click.IntRange(0, 65535), default=9464, show_default=True, help="the port to listen on")
@click.option(
    "--address", default="127.0.0.1", show_default=True, help="the address to listen on (0.0.0.0: every interface)"
)
def cmd_metrics_serve(ctx: Context) -> int:
    """`metrics serve [--port N] [--address A]`: a Prometheus endpoint (`/metrics`) until interrupted; each
    scrape reads the store, its tables and the landing area again (at the clock's time, or --now)."""
    from prometheus_client import start_http_server

    from compaction_assets.cli.prometheus import read_store, registry_of
    from compaction_assets.store.lease import wall_ms

    def read():
        now = ctx.args.now if ctx.args.now is not None else wall_ms()
        return read_store(ctx, now), now

    port, address = ctx.args.port, ctx.args.address
    try:
        server, thread = start_http_server(port, addr=address, registry=registry_of(read))
    except OSError as exc:
        raise CompactionError(f"cannot serve metrics on {address}:{port}: {exc.strerror or exc}") from None
    _progress(f"serving metrics on http://{address}:{port}/metrics (Ctrl-C stops)")
    try:
        thread.join()
    except KeyboardInterrupt:
        _progress("metrics endpoint stopped")
    finally:
        server.shutdown()
    return 0


@command(
    COMPACTION,
    "describe",
    help="segments, ranges, sizes, checkpoint and state of a log",
    example=("describe user-profiles-0",),
)
@click.argument("log", shell_complete=store_logs)
def cmd_describe(ctx: Context) -> int:
    """`describe LOG`: the log's metadata and today's evaluation."""
    from compaction_assets.planning.describe import describe

    handle, cfg = ctx.handle(ctx.args.log), ctx.config(ctx.args.log)
    # the stored configuration, its version and who set it replace the configuration the description used
    _emit(
        {
            **describe(handle, cfg, ctx.now).as_document(),
            **ctx.configs.describe(parse_log_name(ctx.args.log)[0]).as_document(),
            "table": follow.lag(ctx, [ctx.args.log]).get(ctx.args.log, {"skipped": "tables are off"}),
            "paths": _paths(handle, cfg),
        }
    )
    return 0


def _paths(handle, cfg) -> dict:
    """Which way the log's latest state and its table commit go, in this process or through Spark tasks, and
    why: the process's memory budget (COMPACTION_MEMORY_BUDGET) and the bounds derived from it."""
    from compaction_assets.cleaning.decide.placement import memory_budget
    from compaction_assets.state.latest_state import state_path
    from compaction_assets.table.commit.route import state_route

    manifest = handle.manifest()
    state, why = state_path(handle, cfg, manifest)
    table = state_route(manifest)
    return {
        "memory_budget_bytes": memory_budget(),
        "latest_state": {"path": state, "why": why},
        # a commit from the log's tail (offset strategy, nothing removed since the table's mark) builds no state
        "table_commit": {"path": table.path, "why": table.why},
    }


@command(
    COMPACTION,
    "plan",
    help="dry run: what a cleaning would remove and why",
    example=("plan user-profiles-0", "plan --metadata-only"),
)
@click.argument("logs", nargs=-1, metavar="[LOG]...", shell_complete=store_logs, help="logs (default: all)")
@click.option("--metadata-only", is_flag=True, help="only the evaluation; no Spark")
@click.option(
    "--force",
    is_flag=True,
    help="dry-run the cleaning as if forced, even if not eligible (ignored with --metadata-only)",
)
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
