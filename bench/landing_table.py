"""Landing to table through the Dagster daemon, per log, beside the CLI on the same files (issue 56).

    .venv/bin/python -m bench.landing_table [--logs 100] [--records 5000] [--json OUT] [fleet_daemon's options]

`bench/fleet_daemon.py`'s run (a warm Spark Connect server, `dagster-daemon run -w workspace.yaml` with the
shipped sensors and the instance as `scripts/ui.sh` writes it, one new file per log landing at once, then
the CLI's `ingest` + `clean --all` on the same files), its files kept until both topic tables are read.
Then, from each store's topic table: per log, the first snapshot whose `compaction.logs` mark reflects the
log's file (its end offset >= the file's last offset + 1). That snapshot's `timestamp_ms` less the
landing (the rename into the landing area) is the log's landing -> table time: exact, no polling. Prints
p50/p95/max over the logs for the daemon (and for the CLI, from the start of its `ingest`), the whole fleet
(landing -> every log in its table and its latest_state recorded, against the CLI's `ingest` + `clean
--all`, which commit the tables too) and their ratio, and the CPU seconds of each path's processes and of
the Spark Connect server during each.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.fleet_daemon import TOPIC, arguments, measure_with, print_figures


@dataclass(frozen=True)
class Spread:
    """Per-log seconds from a start to the table, over a fleet: the percentiles and how many logs got there."""

    logs: int
    in_table: int
    p50_s: float | None
    p95_s: float | None
    max_s: float | None


def percentile(sorted_values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of values sorted ascending (p95 of 100 logs: the 95th)."""
    return sorted_values[max(0, math.ceil(fraction * len(sorted_values)) - 1)]


def table_times(store_root: Path, topic: str, end_offset: int) -> dict[str, float]:
    """Per log of the topic, when (Unix seconds) its table's first snapshot reflecting offsets below
    `end_offset` was written; logs no snapshot reflects that far are absent."""
    from compaction_assets.store.fs import Storage
    from compaction_assets.table.reading.read import open_table
    from compaction_assets.table.summary import marks_of

    table, _ = open_table(Storage.open(str(store_root)), topic)
    first: dict[str, float] = {}
    for snapshot in sorted(table.snapshots(), key=lambda s: s.timestamp_ms):
        for log, mark in marks_of(snapshot).items():
            if log not in first and mark.log_end_offset >= end_offset:
                first[log] = snapshot.timestamp_ms / 1000
    return first


def spread(times: dict[str, float], start_unix: float, logs: int) -> Spread:
    """The seconds from `start_unix` to each log's table time, as percentiles over the fleet."""
    seconds = sorted(t - start_unix for t in times.values())
    if not seconds:
        return Spread(logs, 0, None, None, None)
    return Spread(
        logs,
        len(seconds),
        round(percentile(seconds, 0.5), 2),
        round(percentile(seconds, 0.95), 2),
        round(seconds[-1], 2),
    )


def landing_to_table(out: dict, work: Path) -> dict:
    """The per-log spreads of both paths and the whole-fleet figures, from the run's kept stores."""
    end_offset = out["records"]  # each log's one file holds offsets 0 .. records - 1
    landed = out["dagster"]["landed_unix"]
    daemon_times = table_times(work / "dagster" / "store", TOPIC, end_offset)
    cli_times = table_times(work / "cli" / "store", TOPIC, end_offset)
    daemon, cli = spread(daemon_times, landed, out["logs"]), spread(cli_times, out["cli_started_unix"], out["logs"])
    # the fleet is done when every log is in its table and has its latest_state recorded (cleaned, checked)
    fleet_s = max(out["dagster"]["wall_s"], daemon.max_s or math.inf)
    return {
        "daemon": asdict(daemon),
        "cli": asdict(cli),
        "daemon_fleet_s": round(fleet_s, 2),
        "cli_fleet_s": round(out["cli_wall_s"], 2),
        "fleet_ratio": round(fleet_s / out["cli_wall_s"], 2),
    }


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="landing-table-"))
    try:
        out = measure_with(args, str(work))
        out["landing_to_table"] = table = landing_to_table(out, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    print_figures(out)
    for path, s in (("daemon, from the landing", table["daemon"]), ("CLI, from its ingest's start", table["cli"])):
        print(
            f"landing -> table per log, {path}: p50 {s['p50_s']} s, p95 {s['p95_s']} s, max {s['max_s']} s "
            f"({s['in_table']} of {s['logs']} logs in the table)"
        )
    print(
        f"fleet landing -> every log in the table and cleaned: daemon {table['daemon_fleet_s']} s, CLI "
        f"{table['cli_fleet_s']} s, ratio {table['fleet_ratio']}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    if table["daemon"]["in_table"] < out["logs"] or out["dagster"]["logs_done"] < out["logs"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
