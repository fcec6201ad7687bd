"""What the benchmark measures besides wall time: Spark's own task metrics (from its JSON event log),
peak memory (psutil sampling of a process tree), and bytes that really landed on disk."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field

import psutil

MB = 1024 * 1024


# --- memory ------------------------------------------------------------------------------------


def tree_roles(root: psutil.Process) -> list[tuple[psutil.Process, str]]:
    """The processes of a tree with their role: `root` (the Python process), `jvm`, `py_workers`
    (Python processes below a JVM: PySpark's daemon and workers) and `other` (e.g. a DuckDB or
    1g-driver subprocess and everything below it)."""
    try:
        kids = root.children(recursive=True)
    except psutil.Error:
        return [(root, "root")]
    out = [(root, "root")]
    jvms = set()
    for p in kids:
        try:
            if p.name() == "java":
                jvms.add(p.pid)
        except psutil.Error:
            pass
    for p in kids:
        if p.pid in jvms:
            out.append((p, "jvm"))
        else:
            out.append((p, "py_workers" if _below(p, jvms, root.pid) else "other"))
    return out


def _below(p: psutil.Process, ancestors: set[int], stop: int) -> bool:
    try:
        cur = p.ppid()
        while cur and cur != stop:
            if cur in ancestors:
                return True
            cur = psutil.Process(cur).ppid()
    except psutil.Error:
        pass
    return False


ROLES = ("root", "jvm", "py_workers", "other")


class ProcSampler:
    """Samples a process tree every `interval` s in a thread. `begin()`/`end()` bracket one measurement;
    `end()` returns the peak RSS per role and of the tree's sum (`rss_*`), and the bytes the tree's
    processes passed to read/write system calls in between (`read_*`, `write_*`, from /proc/PID/io
    rchar/wchar: files, page cache included, shuffle and spill files too) and the CPU seconds (user +
    system) they used in between (`cpu_*`). A process that lives less than one interval may be missed."""

    def __init__(self, pid: int | None = None, interval: float = 0.1):
        self.proc = psutil.Process(pid or os.getpid())
        self.interval = interval
        self._lock = threading.Lock()
        self._win: dict | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="proc-sampler", daemon=True)

    def start(self) -> ProcSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def _read(self) -> tuple[dict, dict]:
        rss = dict.fromkeys(ROLES, 0)
        io: dict[int, tuple[str, int, int, float]] = {}
        for p, role in tree_roles(self.proc):
            try:
                rss[role] += p.memory_info().rss
                c = p.io_counters()
                t = p.cpu_times()
                io[p.pid] = (role, c.read_chars, c.write_chars, t.user + t.system)
            except (psutil.Error, AttributeError):
                pass
        rss["total"] = sum(rss[r] for r in ROLES)
        return rss, io

    def sample(self, first: bool = False) -> None:
        rss, io = self._read()
        with self._lock:
            w = self._win
            if w is None:
                return
            for k, v in rss.items():
                w["peak"][k] = max(w["peak"].get(k, 0), v)
            for pid, (role, r, wr, cpu) in io.items():
                if first:
                    w["base"][pid] = (r, wr, cpu)
                w["last"][pid] = (role, r, wr, cpu)

    def begin(self) -> None:
        with self._lock:
            self._win = {"peak": {}, "base": {}, "last": {}}
        self.sample(first=True)

    def end(self) -> dict[str, int]:
        self.sample()
        with self._lock:
            w, self._win = self._win or {"peak": {}, "base": {}, "last": {}}, None
        out = {f"rss_{k}": v for k, v in w["peak"].items()}
        for role in ROLES:
            out[f"read_{role}"] = out[f"write_{role}"] = 0
            out[f"cpu_{role}"] = 0.0
        for pid, (role, r, wr, cpu) in w["last"].items():
            r0, w0, c0 = w["base"].get(pid, (0, 0, 0.0))
            out[f"read_{role}"] += max(r - r0, 0)
            out[f"write_{role}"] += max(wr - w0, 0)
            out[f"cpu_{role}"] += max(cpu - c0, 0.0)
        for k in ("read", "write", "cpu"):
            out[f"{k}_total"] = sum(out[f"{k}_{r}"] for r in ROLES)
        return out


def self_io() -> dict:
    p = psutil.Process()
    c, t = p.io_counters(), p.cpu_times()
    return {
        "read_chars": c.read_chars,
        "write_chars": c.write_chars,
        "cpu": t.user + t.system,
        "peak_rss": _peak_rss_self(),
    }


def _peak_rss_self() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- disk --------------------------------------------------------------------------------------


def files_under(top: str) -> dict[str, int]:
    out = {}
    for dirpath, _, names in os.walk(top):
        for n in names:
            p = os.path.join(dirpath, n)
            try:
                out[p] = os.path.getsize(p)
            except OSError:
                pass
    return out


def new_bytes(before: dict[str, int], after: dict[str, int], data_only: bool = False) -> int:
    """Bytes of files that appeared (or changed size) between two listings; Spark's .crc files and
    _SUCCESS markers count too (they are written), unless `data_only`."""
    total = 0
    for p, size in after.items():
        if before.get(p) == size:
            continue
        if data_only and (p.endswith(".crc") or os.path.basename(p).startswith(("_", "."))):
            continue
        total += size
    return total


def parquet_files(top: str) -> list[str]:
    return sorted(
        p for p in files_under(top) if p.endswith(".parquet") and not os.path.basename(p).startswith((".", "_"))
    )


# --- Spark's event log -------------------------------------------------------------------------


@dataclass
class SparkFigures:
    tasks: int = 0
    stages: int = 0
    records_read: int = 0
    bytes_read: int = 0
    records_written: int = 0
    bytes_written: int = 0
    shuffle_bytes_written: int = 0
    shuffle_records_written: int = 0
    shuffle_bytes_read: int = 0
    spilled_memory: int = 0
    spilled_disk: int = 0
    peak_execution_memory: int = 0  # max over tasks of Spark's "Peak Execution Memory"
    executor_peaks: dict = field(default_factory=dict)  # executor id -> metric -> max (JVMHeapMemory, ...)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


PEAK_KEYS = (
    "JVMHeapMemory",
    "JVMOffHeapMemory",
    "OnHeapExecutionMemory",
    "OffHeapExecutionMemory",
    "OnHeapStorageMemory",
    "OffHeapStorageMemory",
    "ProcessTreeJVMRSSMemory",
    "ProcessTreePythonRSSMemory",
    "ProcessTreeOtherRSSMemory",
)


def event_log_files(event_dir: str, app_id: str) -> list[str]:
    """The event log of an application: one file, or the files of a rolling log (eventlog_v2_...)."""
    for name in (app_id, app_id + ".inprogress"):
        p = os.path.join(event_dir, name)
        if os.path.isfile(p):
            return [p]
    rolling = os.path.join(event_dir, f"eventlog_v2_{app_id}")
    if os.path.isdir(rolling):

        def index(n: str) -> int:
            try:
                return int(n.split("_")[1])
            except (IndexError, ValueError):
                return 0

        return [os.path.join(rolling, n) for n in sorted(os.listdir(rolling), key=index) if n.startswith("events_")]
    return []


def read_events(paths: list[str]) -> list[dict]:
    out = []
    for path in paths:
        with open(path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break  # a partial last line of a log still being written
                ev = json.loads(line)
                if ev.get("Event") in ("SparkListenerTaskEnd", "SparkListenerStageExecutorMetrics"):
                    out.append(ev)
    return out


def figures_between(events: list[dict], t0_ms: int, t1_ms: int) -> SparkFigures:
    """Spark's task metrics of the tasks launched in [t0, t1] (contenders run one after another), and
    the peak executor metrics of their stages (the driver is the executor in local mode)."""
    fig = SparkFigures()
    stages: set[tuple[int, int]] = set()
    for ev in events:
        if ev["Event"] != "SparkListenerTaskEnd":
            continue
        info = ev.get("Task Info", {})
        if not (t0_ms <= info.get("Launch Time", -1) <= t1_ms):
            continue
        stages.add((ev["Stage ID"], ev.get("Stage Attempt ID", 0)))
        fig.tasks += 1
        tm = ev.get("Task Metrics") or {}
        inp, outp = tm.get("Input Metrics", {}), tm.get("Output Metrics", {})
        sr, sw = tm.get("Shuffle Read Metrics", {}), tm.get("Shuffle Write Metrics", {})
        fig.records_read += inp.get("Records Read", 0)
        fig.bytes_read += inp.get("Bytes Read", 0)
        fig.records_written += outp.get("Records Written", 0)
        fig.bytes_written += outp.get("Bytes Written", 0)
        fig.shuffle_bytes_written += sw.get("Shuffle Bytes Written", 0)
        fig.shuffle_records_written += sw.get("Shuffle Records Written", 0)
        fig.shuffle_bytes_read += sr.get("Remote Bytes Read", 0) + sr.get("Local Bytes Read", 0)
        fig.spilled_memory += tm.get("Memory Bytes Spilled", 0)
        fig.spilled_disk += tm.get("Disk Bytes Spilled", 0)
        fig.peak_execution_memory = max(fig.peak_execution_memory, tm.get("Peak Execution Memory", 0))
        _peaks(fig, info.get("Executor ID", "?"), ev.get("Task Executor Metrics") or {})
    for ev in events:
        if (
            ev["Event"] == "SparkListenerStageExecutorMetrics"
            and (ev.get("Stage ID"), ev.get("Stage Attempt ID", 0)) in stages
        ):
            _peaks(fig, ev.get("Executor ID", "?"), ev.get("Executor Metrics") or {})
    fig.stages = len(stages)
    return fig


def _peaks(fig: SparkFigures, executor: str, metrics: dict) -> None:
    cur = fig.executor_peaks.setdefault(executor, {})
    for k in PEAK_KEYS:
        if k in metrics:
            cur[k] = max(cur.get(k, 0), int(metrics[k]))


def wall_ms() -> int:
    return int(time.time() * 1000)
