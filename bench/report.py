"""Results of a benchmark run: the machine's description, medians, targets, Markdown, JSON and the plot."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import shutil
import statistics
import subprocess
from collections import defaultdict

import psutil

MiB = 2**20
COLORS = {"A": "#1f77b4", "B": "#d62728", "C": "#7f7f7f", "D": "#2ca02c", "E": "#9467bd"}
LABELS = {
    "A": "A full cleaning",
    "B": "B naive window job",
    "C": "C copy (read + write)",
    "D": "D incremental cleaning",
    "E": "E DuckDB window (1 node)",
}


# --- the machine -------------------------------------------------------------------------------


def machine(load_at: str = "start") -> dict:
    cpu = platform.processor() or "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr
        java = " / ".join(line.strip() for line in java.strip().splitlines()[:2])
    except (OSError, subprocess.SubprocessError) as exc:
        java = f"unknown ({exc})"

    def version(pkg: str) -> str:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "not installed"

    return {
        "cpu_model": cpu,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "ram_bytes": psutil.virtual_memory().total,
        "os": platform.platform(),
        "java": java,
        "python": platform.python_version(),
        "pyspark": version("pyspark"),
        "pyarrow": version("pyarrow"),
        "duckdb": version("duckdb"),
        "numpy": version("numpy"),
        "dagster": version("dagster"),
        f"load_average_{load_at}": list(os.getloadavg()),
    }


# --- aggregation -------------------------------------------------------------------------------


def _log_of(result: dict, case: str) -> dict:
    if case in result["logs"]:
        return result["logs"][case]
    for d in result["incremental_logs"]:
        if d["name"] == case:
            return d
    return {}


def summarize(result: dict) -> list[dict]:
    """One row per (case, contender): median time of the repetitions; I/O of the median run; memory
    peaks over all repetitions."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    order = []
    for r in result["runs"]:
        key = (r["case"], r["contender"])
        if key not in groups:
            order.append(key)
        groups[key].append(r)
    rows = []
    for case, kind in order:
        runs = groups[(case, kind)]
        secs = sorted(r["seconds"] for r in runs)
        med = statistics.median(secs)
        mid = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
        sp = mid.get("spark") or {}
        log = _log_of(result, case)
        peaks = defaultdict(int)
        for r in runs:
            for k, v in (r.get("mem") or {}).items():
                if k.startswith("rss_"):
                    peaks[k] = max(peaks[k], v)
            for ex in ((r.get("spark") or {}).get("executor_peaks") or {}).values():
                peaks["jvm_heap"] = max(peaks["jvm_heap"], ex.get("JVMHeapMemory", 0))
        row = {
            "case": case,
            "contender": kind,
            "group": mid["extra"].get("group"),
            "runs": len(runs),
            "seconds_median": med,
            "seconds_min": secs[0],
            "seconds_max": secs[-1],
            "seconds_all": secs,
            "fraction": mid["extra"].get("fraction"),
            # the log's dirty fraction as generated (A on an incremental log resets its checkpoint first)
            "dirty_fraction": mid["extra"].get("dirty_ratio", log.get("dirty_ratio")),
            "evaluated_dirty_ratio": mid.get("dirty_ratio"),
            "log_records": log.get("records"),
            "log_disk_bytes": log.get("disk_bytes"),
            "log_logical_bytes": log.get("logical_bytes"),
            "records_read_spark": sp.get("records_read"),
            "records_written_spark": sp.get("records_written"),
            "bytes_read_spark": sp.get("bytes_read"),
            "bytes_written_spark": sp.get("bytes_written"),
            "shuffle_bytes_written": sp.get("shuffle_bytes_written"),
            "spilled_disk": sp.get("spilled_disk"),
            "tasks": sp.get("tasks"),
            "stages": sp.get("stages"),
            "cpu_seconds": (mid.get("mem") or {}).get("cpu_total"),
            "bytes_read_os": (mid.get("mem") or {}).get("read_total"),
            "bytes_written_os": (mid.get("mem") or {}).get("write_total"),
            "disk_written": mid["disk_written"],
            "disk_written_data": mid["disk_written_data"],
            "output_records": mid["output_records"],
            "engine": mid.get("engine"),
            "reason": mid.get("reason"),
            "peak_jvm_heap": peaks["jvm_heap"] or None,
            "peak_rss_jvm": peaks["rss_jvm"],
            "peak_rss_driver_python": peaks["rss_root"],
            "peak_rss_py_workers": peaks["rss_py_workers"],
            "peak_rss_other": peaks["rss_other"],
            "peak_rss_total": peaks["rss_total"],
        }
        if kind == "E":  # DuckDB reads every record of the files it is given; only its process counts
            row["records_read_spark"] = None
            mem = mid.get("mem") or {}
            row["bytes_read_os"], row["bytes_written_os"] = mem.get("read_other"), mem.get("write_other")
            row["cpu_seconds"] = mem.get("cpu_other")
            row["peak_rss_jvm"] = row["peak_rss_driver_python"] = row["peak_rss_py_workers"] = None
            row["records_read"] = log.get("records")
            row["records_written"] = mid["output_records"]
        else:
            row["records_read"] = sp.get("records_read")
            row["records_written"] = sp.get("records_written")
        rows.append(row)
    by_case = defaultdict(dict)
    for row in rows:
        by_case[row["case"]][row["contender"]] = row
    for row in rows:
        c = by_case[row["case"]].get("C")
        row["vs_C"] = row["seconds_median"] / c["seconds_median"] if c and c["seconds_median"] else None
    return rows


# --- targets -----------------------------------------------------------------------------------


def targets(result: dict) -> list[dict]:
    rows = result["summary"]
    quick = result["mode"] == "quick"
    cell = {(r["case"], r["contender"]): r for r in rows}
    out = []

    def add(name: str, measured: str, ratio: float | None, ok: bool | None, note: str = "") -> None:
        status = "n/a" if ok is None else "PASS" if ok else "MISS"
        notes = [n for n in (note, "quick sizes: not representative" if quick else "") if n]
        out.append({"target": name, "measured": measured, "ratio": ratio, "status": status, "note": "; ".join(notes)})

    def pair(name: str, case: str, x: str, y: str, limit: float) -> None:
        a, b = cell.get((case, x)), cell.get((case, y))
        if a and b:
            r = a["seconds_median"] / b["seconds_median"]
            add(name, f"{x} {a['seconds_median']:.2f}s, {y} {b['seconds_median']:.2f}s", r, r <= limit)
        else:
            add(name, f"no successful run of {' and '.join(k for k, v in ((x, a), (y, b)) if not v)}", None, False)

    matrix_cases = [
        c
        for c in result["logs"]
        if any(r["case"] == c for r in result["runs"]) or any(f["case"] == c for f in result.get("failures", []))
    ]
    for case in matrix_cases:
        pair(f"A <= 1.5 x C, {case}", case, "A", "C", 1.5)
    for case in matrix_cases:
        pair(f"A <= 0.5 x B, {case}", case, "A", "B", 0.5)
    d1 = next((d for d in result["incremental_logs"] if abs(d["fraction"] - 0.01) < 1e-9), None)
    if d1:
        d, a = cell.get((d1["name"], "D")), cell.get((d1["name"], "A"))
        if not (d and a):
            add(
                "D(1%) <= 0.2 x A (time)",
                "no successful run of " + " and ".join(k for k, v in (("D", d), ("A", a)) if not v),
                None,
                False,
            )
        if d and a:
            r = d["seconds_median"] / a["seconds_median"]
            fresh = cell.get((d1["base_case"], "A"))
            note = "A = full cleaning of the same log (checkpoint set to its start)"
            if fresh:
                note += (
                    f"; vs A on the fresh {d1['base_case']} log: {d['seconds_median'] / fresh['seconds_median']:.3f}"
                )
            add(
                "D(1%) <= 0.2 x A (time)",
                f"D {d['seconds_median']:.2f}s, A {a['seconds_median']:.2f}s",
                r,
                r <= 0.2,
                note,
            )
        if d:
            r = d["disk_written_data"] / d1["disk_bytes"]
            add(
                "D(1%) bytes written <= 5% of the log",
                f"{d['disk_written_data'] / MiB:.2f} MiB new files of a {d1['disk_bytes'] / MiB:.1f} MiB log",
                r,
                r <= 0.05,
                "new .parquet and manifest files on disk after vs before; the log's files on disk",
            )
    s = result.get("sensors")
    if s and "planner_ms_per_log_with_read" in s:
        v = s["planner_ms_per_log_with_read"]
        add(
            "planner < 5 ms per log (from metadata)",
            f"{v:.3f} ms with the manifest read ({s['planner_ms_per_log_in_memory']:.3f} ms in memory), "
            f"{s['logs']} logs",
            v / 5,
            v < 5,
        )
        worst = max(s["sensors"].items(), key=lambda kv: kv[1]["seconds"])
        add(
            f"sensor tick < 5 s over {s['logs']} logs",
            ", ".join(f"{n} {x['seconds']:.2f}s" for n, x in s["sensors"].items()),
            worst[1]["seconds"] / 5,
            worst[1]["seconds"] < 5,
            f"slowest: {worst[0]}" + ("" if s["logs"] >= 1000 else f"; only {s['logs']} logs"),
        )
    elif s is not None:
        add(
            "planner < 5 ms per log / sensor tick < 5 s",
            "sensor benchmark failed",
            None,
            False,
            s.get("error", "")[:200],
        )
    o = result.get("oneg")
    if o:
        mem = o.get("mem") or {}
        heap = max(
            (ex.get("JVMHeapMemory", 0) for ex in ((o.get("spark") or {}).get("executor_peaks") or {}).values()),
            default=0,
        )
        measured = (
            f"{'cleaned' if o.get('success') else 'FAILED'} {o['records']:,} records"
            + (f" in {o['seconds']:.1f}s" if o.get("seconds") is not None else "")
            + f", peak RSS {mem.get('rss_total', 0) / MiB:.0f} MiB (JVM {mem.get('rss_jvm', 0) / MiB:.0f}, "
            f"Python {mem.get('rss_root', 0) / MiB:.0f} + workers {mem.get('rss_py_workers', 0) / MiB:.0f})"
            + (f", JVM heap peak {heap / MiB:.0f} of {o.get('driver_max_heap', 0) / MiB:.0f} MiB" if heap else "")
        )
        note = "" if o.get("success") else (o.get("error") or "")[:300]
        if o["records"] < 10_000_000:
            note = (note + "; " if note else "") + f"only {o['records']:,} records (target: 10M)"
        add(
            "a 10M-record log cleans with spark.driver.memory=1g",
            measured,
            (heap / o["driver_max_heap"]) if heap and o.get("driver_max_heap") else None,
            bool(o.get("success")),
            note,
        )
    return out


def targets_text(ts: list[dict]) -> str:
    lines = ["Targets:"]
    for t in ts:
        ratio = f"ratio {t['ratio']:.3f}" if t["ratio"] is not None else "ratio -"
        lines.append(
            f"  {t['status']:4}  {t['target']}: {t['measured']} ({ratio})" + (f" [{t['note']}]" if t["note"] else "")
        )
    return "\n".join(lines)


# --- Markdown ----------------------------------------------------------------------------------


def _m(x) -> str:
    return "-" if x is None else f"{x / MiB:,.1f}"


def _f(x) -> str:
    return "-" if x is None else f"{x:.1f}"


def _n(x) -> str:
    return "-" if x is None else f"{x:,}"


def _s(row: dict) -> str:
    if row["runs"] == 1:
        return f"{row['seconds_median']:.2f}"
    return f"{row['seconds_median']:.2f} [{row['seconds_min']:.2f}-{row['seconds_max']:.2f}]"


def table(rows: list[dict]) -> str:
    head = (
        "| case | | time s, median [min-max] | x C | CPU s | records read | records written | result records "
        "| MiB read (OS) | MiB written (disk) | Spark MiB in / out | shuffle MiB | JVM heap peak MiB "
        "| RSS peak MiB: JVM / driver Py / workers / other |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        vs = "-" if r["vs_C"] is None else f"{r['vs_C']:.2f}"
        rr = _n(r["records_read"]) + (" †" if r["contender"] == "E" else "")
        lines.append(
            f"| {r['case']} | {r['contender']} | {_s(r)} | {vs} | {_f(r.get('cpu_seconds'))} | {rr} "
            f"| {_n(r['records_written'])} | {_n(r['output_records'])} "
            f"| {_m(r['bytes_read_os'])} | {_m(r['disk_written'])} "
            f"| {_m(r['bytes_read_spark'])} / {_m(r['bytes_written_spark'])} | {_m(r['shuffle_bytes_written'])} "
            f"| {_m(r['peak_jvm_heap'])} | {_m(r['peak_rss_jvm'])} / {_m(r['peak_rss_driver_python'])} / "
            f"{_m(r['peak_rss_py_workers'])} / {_m(r['peak_rss_other'])} |"
        )
    return "\n".join(lines)


def markdown(result: dict) -> str:
    m, sp, rows = result["machine"], result["spark"], result["summary"]
    conf = sp.get("conf", {})
    out = [
        f"# Benchmark results ({result['mode']})",
        "",
        f"`{result['command'].strip()}`, started {result['started']}, took {result['total_seconds'] / 60:.1f} min. "
        f"Seed {result['seed']}; {result['reps']} repetition(s) per contender, interleaved, each on a fresh copy "
        f"of the same generated files; times are medians [min-max]. "
        f"Segment size {result['segment_bytes'] / MiB:g} MiB, "
        f"otherwise Kafka's defaults (offset strategy, delete.retention.ms 1 day); 5% tombstones.",
        "",
    ]
    if result["mode"] == "quick":
        out += [
            "**Quick smoke run: tiny sizes, one repetition. The numbers show that every part runs, "
            "not how fast anything is.**",
            "",
        ]
    if result.get("failures"):
        out += ["**Failed runs** (left out of the medians):", ""]
        out += [f"- {f['case']} {f['contender']} run {f['rep'] + 1}: `{f['error'][:400]}`" for f in result["failures"]]
        out += [""]
    out += [
        "## Machine",
        "",
        "| | |",
        "|---|---|",
        f"| CPU | {m['cpu_model']}, {m['logical_cores']} logical cores ({m['physical_cores']} physical) |",
        f"| RAM | {m['ram_bytes'] / 2**30:.1f} GiB |",
        f"| OS | {m['os']} |",
        f"| Java | {m['java']} |",
        f"| Spark | {sp.get('spark_version')} (PySpark {m['pyspark']}), master {sp.get('master')}, "
        f"spark.driver.memory {conf.get('spark.driver.memory', 'default')}, driver max heap "
        f"{(sp.get('driver_max_heap') or 0) / MiB:.0f} MiB, default parallelism {sp.get('default_parallelism')}, "
        f"shuffle partitions {conf.get('spark.sql.shuffle.partitions')}, "
        f"AQE {conf.get('spark.sql.adaptive.enabled')} |",
        f"| Python | {m['python']} (pyarrow {m['pyarrow']}, numpy {m['numpy']}, DuckDB {m['duckdb']}, "
        f"Dagster {m['dagster']}) |",
        f"| load average (1, 5, 15 min) | start {', '.join(f'{x:.1f}' for x in m.get('load_average_start', []))}; "
        f"end {', '.join(f'{x:.1f}' for x in m.get('load_average_end', []))} |",
        "",
    ]
    out += ["## Targets", "", "| target | measured | ratio | result | note |", "|---|---|---|---|---|"]
    for t in result["targets"]:
        ratio = "-" if t["ratio"] is None else f"{t['ratio']:.3f}"
        out.append(f"| {t['target']} | {t['measured']} | {ratio} | **{t['status']}** | {t['note']} |")
    matrix = [r for r in rows if r["group"] == "matrix"]
    out += [
        "",
        "## A, B, C, E on fresh logs",
        "",
        table(matrix),
        "",
        "† DuckDB reads every record of the files it is given (no Spark metrics for E).",
        "",
    ]
    inc = [r for r in rows if r["group"] == "incremental"]
    if inc:
        out += [
            "## D: incremental cleaning",
            "",
            "A log cleaned once, plus new records worth 1%, 10% and 50% of its records (90% update random "
            "existing keys, 10% add new keys, 5% tombstones), sealed. On each, D cleans incrementally; A "
            "cleans it in full (checkpoint set to the log start first, outside the timing); B and C as above.",
            "",
            "| log | new records | records | MiB on disk | dirty ratio | D s | A s (same log) | D / A "
            "| D MiB written (disk) | % of the log | D engine: records read -> written |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        cell = {(r["case"], r["contender"]): r for r in rows}
        for d in result["incremental_logs"]:
            dr, ar = cell.get((d["name"], "D")), cell.get((d["name"], "A"))
            if not dr:
                continue
            eng = dr.get("engine") or {}
            ratio = f"{dr['seconds_median'] / ar['seconds_median']:.3f}" if ar else "-"
            out.append(
                f"| {d['name']} | {d['new_records']:,} | {d['records']:,} | {d['disk_bytes'] / MiB:.1f} "
                f"| {d['dirty_ratio']:.4f} | {_s(dr)} | {_s(ar) if ar else '-'} | {ratio} "
                f"| {_m(dr['disk_written_data'])} | {100 * dr['disk_written_data'] / d['disk_bytes']:.1f}% "
                f"| {_n(eng.get('records_read'))} -> {_n(eng.get('records_written'))} |"
            )
        out += ["", table(inc), ""]
    o = result.get("oneg")
    if o:
        out += [
            "## Cleaning with spark.driver.memory=1g",
            "",
            f"{o['case']}, one cleaning in a subprocess with `SPARK_DRIVER_MEMORY=1g` (driver max heap "
            f"{(o.get('driver_max_heap') or 0) / MiB:.0f} MiB): success **{o.get('success')}** "
            f"(exit code {o.get('exit_code')}), cleaning {o.get('seconds', float('nan')):.1f}s "
            f"({o.get('wall_seconds_with_startup', 0):.1f}s with Spark's start), "
            f"{_n(o.get('records_before'))} -> {_n(o.get('records_after'))} records; peak RSS of the process "
            f"tree {_m((o.get('mem') or {}).get('rss_total'))} MiB (JVM {_m((o.get('mem') or {}).get('rss_jvm'))}, "
            f"Python driver {_m((o.get('mem') or {}).get('rss_root'))}, Python workers "
            f"{_m((o.get('mem') or {}).get('rss_py_workers'))})."
            + (f" Error: `{o.get('error')}`" if o.get("error") else ""),
            "",
        ]
    s = result.get("sensors")
    if s and "sensors" in s:
        out += [
            "## Planner and sensors (metadata only)",
            "",
            f"{s['logs']} small logs: planner {s['planner_ms_per_log_in_memory']:.3f} ms per log from a manifest "
            f"in memory, {s['planner_ms_per_log_with_read']:.3f} ms including reading it. One tick over all logs: "
            + ", ".join(
                f"`{n}` {x['seconds']:.2f}s ({x['run_requests']} run requests, {x['observations']} observations)"
                for n, x in s["sensors"].items()
            )
            + ".",
            "",
        ]
    out += [
        "## Logs",
        "",
        "| case | records | segments | files | MiB on disk | logical MiB | planner ms | generated in s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, lg in result["logs"].items():
        out.append(
            f"| {name} | {lg['records']:,} | {lg['segments']} | {lg['files']} | {lg['disk_bytes'] / MiB:.1f} "
            f"| {lg['logical_bytes'] / MiB:.1f} | {lg['planner_ms']:.3f} | {lg['generate_seconds']:.1f} |"
        )
    out += [
        "",
        "## How it was measured",
        "",
        "- **A** `engine.run(force=True)` on a log whose checkpoint is its start: the project's cleaning "
        "(plan, decide, rewrite, commit). **B** `row_number() OVER (PARTITION BY key ORDER BY offset DESC) = 1` "
        "over every record of every segment file, written as Parquet: the latest record of every key, tombstones "
        "included (it removes none), all columns, in no particular order, no segments or manifest. **C** "
        "`spark.read.parquet(files).write.parquet(out)`. **D** `engine.run(force=True)` on a cleaned log plus new "
        "records. **E** B's query in DuckDB (`COPY (... QUALIFY ...) TO ... (FORMAT PARQUET)`, threads = 2) in a "
        "subprocess; its time is the query's alone, without the process's start.",
        "- One Spark session (the project's settings, `compaction_assets/spark/__init__.py`, plus an event log) "
        "for A-D; "
        + (
            "an untimed warm-up pass of every contender first; "
            if result.get("warm_up")
            else "no warm-up pass (the first contender pays the JVM's warm-up); "
        )
        + "`System.gc()` in the JVM before each Spark contender.",
        "- Records read / written and Spark MiB in / out: Spark's task metrics, from its JSON event log (tasks "
        "launched between the contender's start and end). Spark 4.3's Parquet reader uses vectored reads, which "
        "its input metrics do not count: Spark's MiB in is far below the files' size. **MiB read (OS)** is what "
        "the benchmark's processes passed to read() (/proc/PID/io rchar: files, page cache included, shuffle and "
        "spill files too); **MiB written (disk)** the size of the files that appeared in the run's folder "
        "(data, manifests, Spark's .crc and _SUCCESS), which also sees files written outside Spark's metrics.",
        "- Records read by A count both of its scans (the narrow decide pass and the rewrite); result records of "
        "A and D are the records of the cleaned log (its manifest), of B, C and E the rows of the output files.",
        "- CPU s: user + system CPU seconds of the benchmark's processes during the run (of the median-time "
        "run; /proc via psutil): steadier than wall time when the machine is shared.",
        "- Memory: JVM heap peak from Spark's executor metrics (polled every 250 ms; in local mode the driver is "
        "the executor; `System.gc()` runs before each contender); RSS peaks sampled every 100 ms with psutil over "
        "the benchmark's process tree: the JVM, the Python driver, Python processes below the JVM (PySpark's "
        "daemon and workers), others (E's DuckDB process, whose figures are its own). A JVM does not return "
        "heap it grew, and idle PySpark workers live on between contenders, so those RSS peaks include what "
        "earlier contenders left; RSS sums count shared pages once per process.",
        "- Files are read from the page cache (each copy has just been written); the machine may be shared "
        "with other jobs (see the load average).",
        "",
    ]
    return "\n".join(out)


# --- the plot ----------------------------------------------------------------------------------


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["summary"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [1.1, 1]})
    inc = [r for r in rows if r["group"] == "incremental"]
    base = result["incremental_logs"][0]["base_case"] if result["incremental_logs"] else None
    ticks = {}

    def bars(pts):
        ys = [r["seconds_median"] for _, r in pts]
        return (
            [p[0] for p in pts],
            ys,
            [
                [y - r["seconds_min"] for y, (_, r) in zip(ys, pts)],
                [r["seconds_max"] - y for y, (_, r) in zip(ys, pts)],
            ],
        )

    for kind in "ABCD":
        # the incremental logs (one base, more and more new records), joined by a line
        pts = sorted(
            ((r["dirty_fraction"], r) for r in inc if r["contender"] == kind and r["dirty_fraction"] is not None),
            key=lambda p: p[0],
        )
        if pts:
            xs, ys, err = bars(pts)
            ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, color=COLORS[kind], label=LABELS[kind])
        # the fresh log (a different, larger log: all of it dirty), an open marker on its own
        fresh = [(1.0, r) for r in rows if r["case"] == base and r["contender"] == kind and r["group"] == "matrix"]
        if fresh:
            xs, ys, err = bars(fresh)
            ax.errorbar(
                xs,
                ys,
                yerr=err,
                marker="s",
                mfc="white",
                capsize=3,
                linestyle="none",
                color=COLORS[kind],
                label=None if pts else LABELS[kind],
            )
        for x, row in pts + fresh:
            ticks[x] = row["log_records"]
    if ticks:
        ax.set_xscale("log")
        xs = sorted(ticks)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{x:.1%}\n{ticks[x]:,} rec" if ticks[x] else f"{x:.1%}" for x in xs], fontsize=8)
        ax.minorticks_off()
    ax.set_xlabel(
        "dirty fraction (planner's dirty ratio): a cleaned log plus new records; open squares at 100% = the fresh log",
        fontsize=9,
    )
    ax.set_ylabel("wall time, s (median; bars: min-max)")
    ax.set_title(f"Time against dirty fraction\n{base or ''}", fontsize=10)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)

    matrix = [r for r in rows if r["group"] == "matrix"]
    cases = list(dict.fromkeys(r["case"] for r in matrix))
    kinds = [k for k in "ABCE" if any(r["contender"] == k for r in matrix)]
    width = 0.8 / max(1, len(kinds))
    for i, kind in enumerate(kinds):
        vals = [
            next((r["seconds_median"] for r in matrix if r["case"] == c and r["contender"] == kind), 0) for c in cases
        ]
        bx.bar([j + i * width for j in range(len(cases))], vals, width, color=COLORS[kind], label=LABELS[kind])
    bx.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(cases))])
    bx.set_xticklabels([c.replace(" x ", "\n", 1) for c in cases], fontsize=8)
    bx.set_ylabel("wall time, s (median)")
    bx.set_title("Fresh logs (no clean section)", fontsize=10)
    bx.grid(axis="y", alpha=0.3)
    bx.legend(fontsize=8)
    m = result["machine"]
    fig.suptitle(
        f"compaction benchmark ({result['mode']}), {m['cpu_model']}, {m['logical_cores']} cores, "
        f"Spark {result['spark'].get('spark_version')}, {result['started']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(result: dict, out_dir: str, results_root: str | None) -> None:
    """results.json, results.md and plot.png in `out_dir`; copies as latest.* in `results_root`."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "results.json"), "w") as f:  # first: the figures survive a report bug
        json.dump(result, f, indent=1, default=str)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown(result))
    plot(result, os.path.join(out_dir, "plot.png"))
    if results_root:
        for src, dst in (("results.md", "latest.md"), ("results.json", "latest.json"), ("plot.png", "latest.png")):
            shutil.copyfile(os.path.join(out_dir, src), os.path.join(results_root, dst))


def main() -> None:
    """Rebuild results.md and plot.png (and the targets) from a results.json: `python -m bench.report FILE`."""
    import sys

    path = sys.argv[1]
    with open(path) as f:
        result = json.load(f)
    result["summary"] = summarize(result)
    result["targets"] = targets(result)
    write_all(result, os.path.dirname(os.path.abspath(path)), None)
    print(targets_text(result["targets"]))


if __name__ == "__main__":
    main()
