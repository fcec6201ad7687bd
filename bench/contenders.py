"""The contenders, each run on its own fresh copy of a pristine log, with one Spark session for all.

A  our full cleaning (`engine.run`, forced) of a log whose checkpoint is its log start (no clean section)
B  the naive window job a user would write: over every record of every segment file,
   row_number() OVER (PARTITION BY key ORDER BY offset DESC) = 1, written as Parquet. It keeps the latest
   record of every key, tombstones included (it removes none), all columns, in no particular order;
   no segments, offsets order, delete horizons or manifest
C  the copy limit: Spark reads the same segment files and writes them back, no deduplication
D  an incremental cleaning (`engine.run`, forced) of a log already cleaned plus new records
E  B's deduplication in DuckDB on one node (threads = 2), in a subprocess; for reference only
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pyarrow.parquet as pq

from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.spark import get_spark, spark_conf_from_env
from compaction_assets.store.log_store import LogStore

from . import metrics
from .gen import NOW
from .modes import copy_log

LOG_NAME = "bench-0"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bench_spark_conf(event_dir: str, local_dir: str, driver_memory: str | None) -> dict:
    """The project's Spark settings (compaction_assets.spark) plus what the benchmark needs to read
    Spark's own metrics: a JSON event log with per-stage peak executor metrics, polled every 250 ms.
    Process-tree metrics stay off (Spark forks `pgrep` at every poll for them); psutil measures RSS."""
    extra = {
        "spark.app.name": "compaction-bench",
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": "file://" + os.path.abspath(event_dir),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        "spark.eventLog.logStageExecutorMetrics": "true",
        "spark.executor.metrics.pollingInterval": "250ms",
        "spark.local.dir": os.path.abspath(local_dir),
    }
    if driver_memory:
        extra["spark.driver.memory"] = driver_memory
    return spark_conf_from_env(extra)


def start_spark(conf: dict):
    spark = get_spark(conf)
    jvm = spark.sparkContext._jvm
    info = {
        "spark_version": spark.version,
        "master": spark.sparkContext.master,
        "app_id": spark.sparkContext.applicationId,
        "driver_max_heap": int(jvm.java.lang.Runtime.getRuntime().maxMemory()),
        "default_parallelism": spark.sparkContext.defaultParallelism,
        "conf": {k: v for k, v in sorted(conf.items()) if not k.startswith("spark.driver.extraJava")},
    }
    return spark, info


@dataclass
class Run:
    case: str
    contender: str
    rep: int
    seconds: float
    t0_ms: int
    t1_ms: int
    disk_written: int  # every new file (data, Spark's .crc and _SUCCESS, manifests)
    disk_written_data: int  # new .parquet and manifest files only
    output_records: int
    mem: dict
    engine: dict | None = None
    reason: str | None = None
    dirty_ratio: float | None = None
    spark: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def log_info(store_dir: str) -> dict:
    handle = LogStore(store_dir, gc_grace_s=0).log(LOG_NAME)
    m = handle.manifest()
    files = [handle.path(f.name) for f in m.files()]
    return {
        "records": m.total_records,
        "logical_bytes": m.total_size,
        "disk_bytes": sum(os.path.getsize(p) for p in files),
        "segments": len(m.segments) - 1,
        "files": len(files),
        "log_end_offset": m.log_end_offset,
        "checkpoint": m.checkpoint,
        "log_start_offset": m.log_start_offset,
    }


def run_contender(
    kind: str,
    spark,
    cfg,
    pristine: str,
    work: str,
    case: str,
    rep: int,
    sampler: metrics.ProcSampler,
    duck_threads: int = 2,
) -> Run:
    """Copy `pristine` to `work`, run contender `kind` (A, B, C, D or E) on it, measure, clean up."""
    work = os.path.abspath(work)
    store_dir = os.path.join(work, "store")
    copy_log(pristine, store_dir)
    handle = LogStore(store_dir, gc_grace_s=0).log(LOG_NAME)
    m = handle.manifest()
    if kind == "A" and m.checkpoint != m.log_start_offset:
        writer.set_checkpoint(handle, m.log_start_offset)  # no clean section (outside the timing)
        m = handle.manifest()
    uris = [handle.spark_uri(f.name) for f in m.files()]
    paths = [handle.path(f.name) for f in m.files()]
    out_dir = os.path.join(work, f"out-{kind}")
    before = metrics.files_under(work)
    if kind != "E":
        spark.sparkContext._jvm.System.gc()
    sampler.begin()
    t0_ms = metrics.wall_ms()
    t0 = time.perf_counter()
    engine_stats = reason = dirty = None
    extra: dict = {}
    if kind in ("A", "D"):
        rep_ = engine.run(handle, cfg, NOW, spark=spark, force=True, gc=False)
        engine_stats = rep_.stats.as_dict() if rep_.stats else None
        reason, dirty = rep_.reason, rep_.evaluation.dirty_ratio
    elif kind == "B":
        naive_window(spark, uris, "file://" + out_dir)
    elif kind == "C":
        spark.read.parquet(*uris).write.parquet("file://" + out_dir)
    elif kind == "E":
        extra = duckdb_dedup(paths, out_dir, duck_threads, work)
    else:
        raise ValueError(kind)
    seconds = time.perf_counter() - t0
    t1_ms = metrics.wall_ms()
    mem = sampler.end()
    if kind == "E":  # the subprocess's own figures (it may end between two samples)
        extra["wall_seconds_with_startup"] = seconds
        seconds = extra["seconds"]
        mem["read_other"], mem["write_other"] = extra["read_chars"], extra["write_chars"]
        mem["cpu_other"] = extra["cpu"]
        mem["rss_other"] = max(mem.get("rss_other", 0), extra["peak_rss"])
        mem["read_total"] = sum(mem[f"read_{r}"] for r in metrics.ROLES)
        mem["write_total"] = sum(mem[f"write_{r}"] for r in metrics.ROLES)
        mem["cpu_total"] = sum(mem[f"cpu_{r}"] for r in metrics.ROLES)
    after = metrics.files_under(work)
    if kind in ("A", "D"):
        output_records = handle.manifest().total_records
    else:
        output_records = sum(pq.read_metadata(p).num_rows for p in metrics.parquet_files(out_dir))
    data_written = metrics.new_bytes(before, after, data_only=True)
    run = Run(
        case=case,
        contender=kind,
        rep=rep,
        seconds=seconds,
        t0_ms=t0_ms,
        t1_ms=t1_ms,
        disk_written=metrics.new_bytes(before, after),
        disk_written_data=data_written,
        output_records=output_records,
        mem=mem,
        engine=engine_stats,
        reason=reason,
        dirty_ratio=dirty,
        extra=extra,
    )
    shutil.rmtree(work, ignore_errors=True)
    return run


def naive_window(spark, uris: list[str], out_uri: str) -> None:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    latest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
    (
        spark.read.parquet(*uris)
        .withColumn("rn", F.row_number().over(latest_first))
        .where(F.col("rn") == 1)
        .drop("rn")
        .write.parquet(out_uri)
    )


def duckdb_dedup(paths: list[str], out_dir: str, threads: int, work: str) -> dict:
    """E in a subprocess (its own memory, measured by the sampler as `other`)."""
    os.makedirs(out_dir, exist_ok=True)
    spec = os.path.join(work, "duck.json")
    with open(spec, "w") as f:
        json.dump({"files": paths, "out": os.path.join(out_dir, "part-0.parquet"), "threads": threads}, f)
    proc = subprocess.run([sys.executable, "-m", "bench.duck", spec], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"duckdb run failed: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])
