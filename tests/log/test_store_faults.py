"""Faults of the log store (SPEC §5 one cleaning at a time, §7.4 all-or-nothing visibility):
leases and their takeover, leftovers of interrupted changes, and processes SIGKILLed in the middle of
a cleaning or an append (tests/fault_helpers.py is the subprocess side).
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets.cleaning import engine
from compaction_assets.errors import ConflictError, LockedError
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records, segment_records
from compaction_assets.segments.records import record_size
from compaction_assets.state.latest_state import latest_state_df
from compaction_assets.store.log_store import LogStore, wall_ms
from compaction_assets.topics.config import build_config
from tests.fault_helpers import batch

REPO = Path(__file__).resolve().parents[2]
CFG0 = build_config({})


# --- subprocess plumbing ---------------------------------------------------------------------------------


class Helper:
    """A `python -m tests.fault_helpers ...` subprocess in its own process group (its JVM included)."""

    def __init__(self, args: list[str], log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = log_dir / f"helper-{uuid.uuid4().hex[:8]}.stderr"
        self._stderr = open(self.stderr_path, "wb")
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.fault_helpers", *args],
            cwd=str(REPO),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._cond = threading.Condition()
        self._eof = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.killed_at: float | None = None

    def _read(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def seen(self, prefix: str) -> float | None:
        for t, line in self.lines:
            if line.startswith(prefix):
                return t
        return None

    def wait_for(self, prefix: str, timeout: float = 240) -> float | None:
        """Monotonic time at which a line starting with `prefix` appeared; None if the process ended first."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                t = self.seen(prefix)
                if t is not None:
                    return t
                if self._eof:
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise AssertionError(
                        f"helper did not print {prefix!r} within {timeout}s; "
                        f"output: {self.lines[-5:]}; stderr: {self.stderr()[-2000:]}"
                    )
                self._cond.wait(left)

    def go(self) -> None:
        """Open the gate of a helper started with --gate."""
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def kill(self) -> None:
        """SIGKILL the helper's whole process group (Python, its JVM and Spark's Python workers)."""
        self.killed_at = time.monotonic()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        self._reader.join(timeout=10)
        self._stderr.close()

    def finish(self, timeout: float = 300) -> int:
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            self.kill()  # also reaps a JVM left behind, if any
        return rc

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""


# A killed helper's lease: the test tries it at once after the kill and must be refused. Its heartbeat
# renewed it every third of this, so two seconds at least are left of it then, even on a loaded machine.
KILLED_TTL_S = 3.0


def refused_while_live(handle, kind: str, where: str) -> None:
    """The lease a killed helper left (if it held one) refuses a new holder, naming the log and the kind;
    taken directly, as a cleaning or an append takes it. Fails when it expired before it could be tried."""
    holder = handle.lock_holder(kind)
    if holder is None:  # killed before it took the lease, or after it let it go
        return
    assert holder.expires_ms > wall_ms(), f"{where}: the dead {kind} lease expired before the test tried it"
    with pytest.raises(LockedError) as info, handle.lock(kind, purpose=f"a {kind} after a kill"):
        pass
    assert handle.name in str(info.value) and kind in str(info.value), where


def wait_lease_expiry(handle, kind: str, slack_s: float = 0.05) -> None:
    holder = handle.lock_holder(kind)
    if holder is not None:
        left = holder.expires_ms - wall_ms()
        if left > 0:
            time.sleep(left / 1000 + slack_s)


# --- invariants ------------------------------------------------------------------------------------------


def check_layout(handle, m) -> list:
    """Segments tile [first base, LEO) without gaps or overlaps; records lie in their segment, in
    strictly increasing offset order; per-segment counts and logical sizes match the manifest."""
    segs = m.segments
    assert segs, "a log has at least its active segment"
    assert segs[0].base_offset <= m.log_start_offset <= m.log_end_offset
    for a, b in itertools.pairwise(segs):
        assert a.base_offset <= a.next_offset, a
        assert a.next_offset == b.base_offset, f"gap or overlap between {a} and {b}"
    assert segs[-1].base_offset <= segs[-1].next_offset == m.log_end_offset
    last = -1
    everything = []
    for seg, records in segment_records(handle, m):
        offsets = [r.offset for r in records]
        for o in offsets:
            assert seg.base_offset <= o < seg.next_offset, (o, seg)
            assert o > last, f"offset {o} after {last}"
            assert o >= m.log_start_offset
            last = o
        assert len(records) == seg.records, (seg, len(records))
        assert sum(record_size(r.key, r.value, r.headers) for r in records) == seg.size, seg
        everything += records
    return everything


def referenced_files_exist(handle) -> None:
    """Every file a recent manifest references exists; a side table (a folder) still holds its data."""
    for name in handle.referenced():
        path = handle.path(name)
        assert os.path.exists(path), f"referenced file {name} is missing"
        if os.path.isdir(path):
            parts = [n for _, _, names in os.walk(path) for n in names if n.endswith(".parquet")]
            assert parts, f"referenced side table {name} has lost its files"


def only_referenced_data_left(handle) -> None:
    """After garbage collection, every Parquet file under data/ and every side table is referenced."""
    refs = handle.referenced()
    for dirpath, _, names in os.walk(handle.path("data")):
        for n in names:
            if n.endswith(".parquet") and not n.startswith("."):
                rel = os.path.relpath(os.path.join(dirpath, n), handle.path(""))
                assert rel in refs, f"unreferenced leftover {rel}"
    for dirpath, _, names in os.walk(handle.path("side")):
        for n in names:
            rel = os.path.relpath(os.path.join(dirpath, n), handle.path(""))
            table = "/".join(rel.split("/")[:2])
            assert table in refs, f"file {rel} of an unreferenced side table"
    for n in os.listdir(handle.path("_log")):
        assert not n.startswith(".tmp-"), f"leftover temporary manifest {n}"


def latest_state(spark, handle, config) -> dict:
    rows = latest_state_df(spark, handle, config).collect()
    return {bytes(r["key"]): (int(r["offset"]), None if r["value"] is None else bytes(r["value"])) for r in rows}


def log_files(handle) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(handle.path("")):
        out += [os.path.relpath(os.path.join(dirpath, n), handle.path("")) for n in names]
    return sorted(p for p in out if not p.startswith("_locks"))


# =========================================================================================================
# (a) leases
# =========================================================================================================


@pytest.fixture
def log(store):
    h = store.log("faults-0")
    writer.append(h, CFG0, [{"key": f"k{i}", "value": f"v{i}", "timestamp": i + 1} for i in range(20)])
    writer.roll(h)
    return h


def test_second_lock_refused_while_held(store, log):
    with log.lock("clean", purpose="cleaning at 42"):
        holder = log.lock_holder("clean")
        assert holder.pid == os.getpid() and holder.expires_ms > wall_ms()
        with pytest.raises(LockedError) as info, log.lock("clean"):
            pytest.fail("a second holder got the lock")
        msg = str(info.value)
        assert "faults-0" in msg and "clean" in msg and "cleaning at 42" in msg
        assert holder.owner in msg and "expires" in msg
        # another store object on the same folder (another process would see the same) is refused too
        other = LogStore(store.location).log("faults-0")
        with pytest.raises(LockedError), other.lock("clean"):
            pass
        # the lease is still the first holder's
        assert log.lock_holder("clean").owner == holder.owner
        # locks of another kind are independent
        with log.lock("append"):
            assert log.lock_holder("append").owner != holder.owner
    assert log.lock_holder("clean") is None
    with log.lock("clean"):  # free again once released
        pass


def test_lock_released_when_body_raises(log):
    with pytest.raises(RuntimeError), log.lock("clean"):
        raise RuntimeError("boom")
    assert log.lock_holder("clean") is None


def test_engine_run_refused_while_cleaning_lock_held(log):
    before = log.manifest()
    files = log_files(log)
    with log.lock("clean", purpose="another cleaning"), pytest.raises(LockedError, match="another cleaning"):
        engine.run(log, CFG0, 10**6, spark=None, force=True)
    assert log.manifest() == before and log_files(log) == files


def test_append_refused_while_append_lock_held(log):
    before = log.manifest()
    with log.lock("append", purpose="other ingestion"), pytest.raises(LockedError, match="other ingestion"):
        writer.append(log, CFG0, [{"key": "x", "value": "y", "timestamp": 1}])
    assert log.manifest() == before


def write_lease(handle, kind: str, expires_ms: int, owner: str = "ghost-host:4242:deadbeef") -> None:
    os.makedirs(handle.path("_locks"), exist_ok=True)
    with open(handle.path(f"_locks/{kind}.lock"), "w") as fh:
        json.dump(
            {
                "owner": owner,
                "pid": 4242,
                "host": "ghost-host",
                "purpose": "a dead cleaning",
                "acquired_ms": expires_ms - 300_000,
                "expires_ms": expires_ms,
            },
            fh,
        )


def test_expired_lease_of_dead_holder_taken_over(log):
    write_lease(log, "clean", wall_ms() - 1000)
    with log.lock("clean"):
        holder = log.lock_holder("clean")
        assert holder.owner != "ghost-host:4242:deadbeef" and holder.pid == os.getpid()
    assert log.lock_holder("clean") is None


def test_unexpired_lease_of_other_holder_refused(log):
    write_lease(log, "clean", wall_ms() + 60_000)
    with pytest.raises(LockedError) as info, log.lock("clean"):
        pass
    assert "ghost-host:4242:deadbeef" in str(info.value) and "a dead cleaning" in str(info.value)
    assert log.lock_holder("clean").owner == "ghost-host:4242:deadbeef"  # left untouched


def wait_renewal(log, kind: str, expires_ms: int, timeout: float = 120) -> int:
    """The lease's next expiry written by its holder's heartbeat, read through the store."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        holder = log.lock_holder(kind)
        if holder is not None and holder.expires_ms != expires_ms:
            return holder.expires_ms
        time.sleep(0.05)
    raise AssertionError(f"the live holder never renewed its {kind} lease (expiry {expires_ms})")


def test_killed_holder_lease_renewed_while_alive_and_taken_over_after_expiry(log, tmp_path):
    ttl = 3.0
    helper = Helper(["hold-lock", log.store.location, log.name, "clean", str(ttl)], tmp_path / "helper")
    try:
        assert helper.wait_for("LOCKED", timeout=60) is not None, helper.stderr()
        first = log.lock_holder("clean").expires_ms
        # the heartbeat renews the live holder's lease: observed in the store, twice
        renewed = wait_renewal(log, "clean", wait_renewal(log, "clean", first))
        assert renewed > first
        with pytest.raises(LockedError, match="held by a test subprocess"), log.lock("clean"):
            pass
        assert log.lock_holder("clean").pid == helper.proc.pid
    finally:
        helper.kill()
    killed_ms = wall_ms()
    # dead: the lease is never renewed again, and it is refused until the expiry the store holds
    expires = log.lock_holder("clean").expires_ms
    assert expires <= killed_ms + ttl * 1000 + 50
    while wall_ms() < expires - 100:
        with pytest.raises(LockedError), log.lock("clean"):
            pass
        assert log.lock_holder("clean").expires_ms == expires
        time.sleep(0.2)
    wait_lease_expiry(log, "clean")
    with log.lock("clean"):
        assert log.lock_holder("clean").pid == os.getpid()


# =========================================================================================================
# (b) leftovers of interrupted changes
# =========================================================================================================


def test_collect_garbage_removes_unreferenced_keeps_referenced(log):
    writer.append(log, CFG0, [{"key": "z", "value": None, "timestamp": 99}])
    m = log.manifest()
    records = list(iter_records(log))
    some_file = m.files()[0].name
    orphans = [
        "data/orphan.parquet",
        "data/clean-dead/seg_idx=0/part-00000.parquet",
        "data/clean-dead/_SUCCESS",
        "side/remembered-dead/part-0.parquet",
        "side/tombstones-dead/part-0.parquet",
        "_log/.tmp-0123abcd-00000000000000000099.json",
    ]
    for rel in orphans:
        os.makedirs(os.path.dirname(log.path(rel)), exist_ok=True)
        shutil.copyfile(log.path(some_file), log.path(rel))
    # not yet older than the grace period: kept
    assert log.collect_garbage(grace_s=600) == []
    removed = log.collect_garbage(grace_s=0)
    assert sorted(os.path.relpath(p, log.path("")) for p in removed) == sorted(orphans)
    for rel in orphans:
        assert not os.path.exists(log.path(rel))
    referenced_files_exist(log)
    only_referenced_data_left(log)
    assert log.manifest() == m
    assert list(iter_records(log)) == records
    assert log.collect_garbage(grace_s=0) == []


def test_collect_garbage_keeps_referenced_side_tables(log):
    # side tables (tombstone index, remembered deletes) are folders written by Spark: part files
    # plus _SUCCESS; a manifest references the folder. Garbage collection must keep what is inside.
    for table in ("side/tombstones-0a1b", "side/remembered-2c3d"):
        os.makedirs(log.path(table))
        pq.write_table(pa.table({"key": [b"k1"], "m_offset": [3]}), log.path(f"{table}/part-00000-x.snappy.parquet"))
        open(log.path(f"{table}/_SUCCESS"), "w").close()
    log.update(
        lambda m: m.with_(
            tombstone_index={"file": "side/tombstones-0a1b", "count": 1},
            remembered={"file": "side/remembered-2c3d", "count": 1, "min_expiry": 10**12},
        )
    )
    os.makedirs(log.path("side/remembered-dead"))
    pq.write_table(pa.table({"key": [b"k1"]}), log.path("side/remembered-dead/part-00000.parquet"))
    removed = [os.path.relpath(p, log.path("")) for p in log.collect_garbage(grace_s=0)]
    assert removed == ["side/remembered-dead/part-00000.parquet"]
    for table in ("side/tombstones-0a1b", "side/remembered-2c3d"):
        assert pq.read_table(log.path(table)).num_rows == 1
    referenced_files_exist(log)


def test_collect_garbage_keeps_files_of_recent_manifest_versions(log):
    # files of the previous manifest versions stay (a reader may still hold such a version)
    old_files = {f.name for f in log.manifest().files()}
    writer.set_log_start(log, 20)
    assert log.manifest().files() == []
    log.collect_garbage(grace_s=0)
    for name in old_files:
        assert os.path.exists(log.path(name))


def test_torn_manifest_write_ignored_by_readers(store, log):
    m = log.manifest()
    records = list(iter_records(log))
    torn = m.to_json()[: len(m.to_json()) // 2]
    tmp = log.path(f"_log/.tmp-{uuid.uuid4().hex}-{m.version + 1:020d}.json")
    with open(tmp, "wb") as fh:
        fh.write(torn)
    assert log.manifest() == m
    assert list(iter_records(log)) == records
    assert store.logs() == ["faults-0"]
    # the next change commits the next version normally
    writer.append(log, CFG0, [{"key": "n", "value": "new", "timestamp": 5}])
    m2 = log.manifest()
    assert m2.version == m.version + 1 and m2.log_end_offset == m.log_end_offset + 1
    assert os.path.exists(tmp)
    removed = log.collect_garbage(grace_s=0)
    assert tmp in removed and not os.path.exists(tmp)


def test_unreadable_newest_manifest_falls_back_to_previous(log):
    m = log.manifest()
    path = log.path(f"_log/{m.version + 1:020d}.json")
    with open(path, "wb") as fh:
        fh.write(m.to_json()[:40])
    assert log.manifest() == m


# =========================================================================================================
# (c) processes killed mid-way
# =========================================================================================================

CLEAN_LOG = "kills-0"
CLEAN_CONF = {
    "compaction.strategy": "timestamp",
    "delete.retention.ms": 1000,
    "segment.bytes": 16_000,
    "min.cleanable.dirty.ratio": 0.01,
}
NOW1 = 2_000_000  # the set-up cleaning: stamps tombstone horizons (NOW1 + 1000)
NOW2 = 3_000_000  # the killed cleaning: removes expired tombstones, remembers deletes
SLOW_TRIALS = int(os.environ.get("KILL_TRIALS", "30"))  # trials of the @slow variants


@dataclass
class CleanBase:
    root: Path
    work: Path
    config: object
    before: list
    before_manifest: object
    after: list
    after_checkpoint: int
    latest: dict
    trials_dir: Path


@pytest.fixture(scope="module")
def clean_base(tmp_path_factory, spark):
    work = tmp_path_factory.mktemp("kill-clean")
    root = work / "base"
    config = build_config(CLEAN_CONF)
    st = LogStore(str(root), gc_grace_s=0)
    h = st.log(CLEAN_LOG)
    writer.append(h, config, batch(3000, seed=1))
    writer.roll(h)
    first = engine.run(h, config, NOW1, spark=spark)
    assert first.cleaned and first.stats.tombstones_stamped > 0
    writer.append(h, config, batch(1500, seed=2))
    writer.roll(h)
    before_manifest = h.manifest()
    before = check_layout(h, before_manifest)
    latest = latest_state(spark, h, config)

    expected_root = work / "expected"
    shutil.copytree(root, expected_root)
    eh = LogStore(str(expected_root), gc_grace_s=0).log(CLEAN_LOG)
    report = engine.run(eh, config, NOW2, spark=spark)
    assert report.cleaned and report.stats.tombstones_removed > 0
    em = eh.manifest()
    after = check_layout(eh, em)
    assert after != before and len(after) < len(before)
    # sanity of the expectation itself (SPEC §7.5): the cleaning does not change the latest state
    assert latest_state(spark, eh, config) == latest
    return CleanBase(root, work, config, before, before_manifest, after, em.checkpoint, latest, work / "trials")


def start_clean_trial(base: CleanBase, name: str) -> tuple[Path, Helper]:
    """Copy the base log and start a gated cleaning subprocess on it (its Spark session starts at once)."""
    root = base.trials_dir / name
    # fresh modification times: the copy must not look like hour-old leftovers to a garbage collection
    shutil.copytree(base.root, root, copy_function=shutil.copy)
    helper = Helper(
        ["clean", str(root), CLEAN_LOG, str(NOW2), json.dumps(CLEAN_CONF), "--ttl", str(KILLED_TTL_S), "--gate"],
        base.work / "logs",
    )
    return root, helper


def kill_at(helper: Helper, marker: str, delay: float) -> None:
    """Open the gate, wait for `marker`, sleep `delay` seconds, SIGKILL the helper."""
    assert helper.wait_for("READY") is not None, helper.stderr()[-3000:]
    helper.go()
    if helper.wait_for(marker) is None:
        rc = helper.finish()
        raise AssertionError(
            f"cleaning ended (rc={rc}) before {marker!r}: {helper.lines[-5:]} {helper.stderr()[-3000:]}"
        )
    if delay > 0:
        time.sleep(delay)
    helper.kill()


def verify_after_kill(base: CleanBase, spark, root: Path, helper: Helper) -> bool:
    """The checks after a killed cleaning; returns whether the killed cleaning had committed."""
    where = f"trial {root.name}, output {[line for _, line in helper.lines]}"
    st = LogStore(str(root), lock_ttl_s=2, gc_grace_s=0)
    h = st.log(CLEAN_LOG)
    # the dead cleaning's lease blocks a new cleaning until it expires, with a clear message: tried first,
    # while at least two thirds of KILLED_TTL_S are left of it (its heartbeat renewed it every third)
    refused_while_live(h, "clean", where)
    m = h.manifest()  # reads back
    assert m.log_end_offset == base.before_manifest.log_end_offset, where
    assert m.log_start_offset == base.before_manifest.log_start_offset, where
    records = check_layout(h, m)
    committed = bool(m.last_cleaning) and m.last_cleaning.now == NOW2
    if committed:
        assert records == base.after, where
        assert m.checkpoint == base.after_checkpoint, where
    else:
        assert records == base.before, where  # nothing of the cleaning is visible
        assert m.checkpoint == base.before_manifest.checkpoint, where
        assert m.segments == base.before_manifest.segments, where
    # what the process printed before it was killed decides the outcome where it can
    if not helper.seen("UPDATE 2"):
        assert not committed, where  # its commit never started
    if helper.seen("UPDATED 2") or helper.seen("DONE"):
        assert committed, where
    assert latest_state(spark, h, base.config) == base.latest, where
    referenced_files_exist(h)

    wait_lease_expiry(h, "clean")
    # a following run (it collects the leftovers first, grace 0) succeeds and ends where an
    # uninterrupted cleaning ends
    report = engine.run(h, base.config, NOW2, spark=spark, force=True)
    assert report.cleaned, where
    m2 = h.manifest()
    assert check_layout(h, m2) == base.after, where
    assert m2.checkpoint == base.after_checkpoint and m2.uncleanable is None, where
    referenced_files_exist(h)
    h.collect_garbage(grace_s=0)
    only_referenced_data_left(h)
    referenced_files_exist(h)
    assert check_layout(h, h.manifest()) == base.after, where
    return committed


def run_clean_trials(base: CleanBase, spark, plans: list[tuple[str, str, float]], ahead: int = 6) -> list[bool]:
    """Kill one cleaning per plan (name, marker, delay). Up to `ahead` helpers start their Spark ahead
    of time (they wait at their gate), so that JVM start-ups overlap the checks of earlier trials."""
    outcomes: list[bool] = []
    started: list[tuple[Path, Helper]] = []
    try:
        for i, (_name, marker, delay) in enumerate(plans):
            while len(started) < len(plans) and len(started) < i + ahead:
                started.append(start_clean_trial(base, plans[len(started)][0]))
            root, helper = started[i]
            kill_at(helper, marker, delay)
            outcomes.append(verify_after_kill(base, spark, root, helper))
            shutil.rmtree(root, ignore_errors=True)
    finally:
        for _, helper in started[len(outcomes) :]:
            helper.kill()
    return outcomes


def test_cleaning_killed_at_several_moments(clean_base, spark):
    rng = random.Random(20240607)
    plans = [
        ("start", "START", 0.0),  # lock taken, nothing else
        ("deciding", f"PROGRESS {CLEAN_LOG}: deciding", rng.uniform(0.0, 1.0)),
        ("rewriting", f"PROGRESS {CLEAN_LOG}: rewriting", rng.uniform(0.0, 1.0)),
        ("side-tables", f"PROGRESS {CLEAN_LOG}: updating", rng.uniform(0.0, 0.5)),
        ("commit", "UPDATE 2", 0.0),  # the cleaning's commit under way
        ("after-commit", "UPDATED 2", 0.0),  # committed, lock not yet released
    ]
    outcomes = run_clean_trials(clean_base, spark, plans)
    # each trial's outcome is checked against the markers printed before its kill (verify_after_kill);
    # the last was killed after its commit returned
    assert outcomes[-1] is True


@pytest.mark.slow
@pytest.mark.ci_real
def test_cleaning_killed_at_random_moments(clean_base, spark):
    # calibrate: the typical duration of the cleaning from START to DONE, not killed
    root, helper = start_clean_trial(clean_base, "calibrate")
    assert helper.wait_for("READY") is not None, helper.stderr()[-3000:]
    helper.go()
    assert helper.finish() == 0, helper.stderr()[-3000:]
    duration = helper.seen("DONE") - helper.seen("START")
    assert verify_after_kill(clean_base, spark, root, helper) is True
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(7)
    plans = [(f"random-{i}", "START", rng.uniform(0, duration * 1.1)) for i in range(SLOW_TRIALS)]
    outcomes = run_clean_trials(clean_base, spark, plans, ahead=3)
    print(f"{len(outcomes)} cleanings killed: {outcomes.count(True)} had committed, {outcomes.count(False)} not")
    assert False in outcomes, "no kill landed before a commit: the trials tested nothing but finished cleanings"


# --- append -----------------------------------------------------------------------------------------------

APPEND_LOG = "ingest-0"
APPEND_CONF = {"segment.bytes": 10_000}
APPEND_N = 60_000
APPEND_SEED = 11


@dataclass
class AppendBase:
    root: Path
    work: Path
    before: list
    before_manifest: object
    expected_all: list
    duration: float


@pytest.fixture(scope="module")
def append_base(tmp_path_factory):
    work = tmp_path_factory.mktemp("kill-append")
    root = work / "base"
    config = build_config(APPEND_CONF)
    h = LogStore(str(root), gc_grace_s=0).log(APPEND_LOG)
    writer.append(h, config, [{"key": f"pre-{i}", "value": "p", "timestamp": 5} for i in range(100)])
    bm = h.manifest()
    before = check_layout(h, bm)
    # calibration: the whole append in a subprocess, not killed
    calib = work / "calibrate"
    shutil.copytree(root, calib)
    helper = Helper(
        ["append", str(calib), APPEND_LOG, json.dumps(APPEND_CONF), str(APPEND_N), str(APPEND_SEED)], work / "logs"
    )
    assert helper.finish(timeout=120) == 0, helper.stderr()[-3000:]
    duration = helper.seen("DONE") - helper.seen("START")
    ch = LogStore(str(calib)).log(APPEND_LOG)
    cm = ch.manifest()
    assert cm.log_end_offset == bm.log_end_offset + APPEND_N
    assert len(cm.segments) > 20  # the batch rolled many segments: many files written before the commit
    expected_all = check_layout(ch, cm)
    assert expected_all[:100] == before
    tail = expected_all[100:]
    rows = batch(APPEND_N, APPEND_SEED)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in tail[:50] + tail[-50:]] == [
        (100 + i, rows[i]["key"].encode(), rows[i]["value"], rows[i]["timestamp"])
        for i in list(range(50)) + list(range(APPEND_N - 50, APPEND_N))
    ]
    return AppendBase(root, work, before, bm, expected_all, duration)


def append_trial(base: AppendBase, name: str, delay: float, marker: str = "START") -> str:
    root = base.work / "trials" / name
    shutil.copytree(base.root, root, copy_function=shutil.copy)
    helper = Helper(
        ["append", str(root), APPEND_LOG, json.dumps(APPEND_CONF), str(APPEND_N), str(APPEND_SEED)]
        + ["--ttl", str(KILLED_TTL_S)],
        base.work / "logs",
    )
    assert helper.wait_for(marker, timeout=120) is not None, helper.stderr()[-3000:]
    time.sleep(delay)
    helper.kill()
    where = f"trial {name} (kill {delay:.3f}s after {marker}), output {[line for _, line in helper.lines]}"

    st = LogStore(str(root), lock_ttl_s=1, gc_grace_s=0)
    h = st.log(APPEND_LOG)
    refused_while_live(h, "append", where)
    m = h.manifest()
    records = check_layout(h, m)
    if m.log_end_offset == base.before_manifest.log_end_offset:
        outcome = "none"
        assert records == base.before, where
        assert m.version == base.before_manifest.version, where
    else:
        outcome = "all"
        assert m.log_end_offset == base.before_manifest.log_end_offset + APPEND_N, where
        assert records == base.expected_all, where
    if not helper.seen("UPDATE 1"):
        assert outcome == "none", where  # its commit never started
    if helper.seen("UPDATED 1") or helper.seen("DONE"):
        assert outcome == "all", where
    referenced_files_exist(h)

    # the dead appender's lease was refused (above, first thing); once it expires, appends work
    wait_lease_expiry(h, "append")
    writer.append(h, build_config(APPEND_CONF), [{"key": "late", "value": "x", "timestamp": 1}])
    m2 = h.manifest()
    assert m2.log_end_offset == m.log_end_offset + 1, where
    h.collect_garbage(grace_s=0)
    only_referenced_data_left(h)
    after = check_layout(h, h.manifest())
    assert after[:-1] == records and after[-1].key == b"late", where
    shutil.rmtree(root, ignore_errors=True)
    return outcome


def test_append_killed_mid_way_all_or_nothing(append_base):
    rng = random.Random(99)
    d = append_base.duration
    delays = [0.0, 0.1 * d, 0.4 * d, 0.7 * d, rng.uniform(0, d)]
    outcomes = [append_trial(append_base, f"a{i}", delay) for i, delay in enumerate(delays)]
    assert outcomes[0] == "none"
    # killed while committing (either outcome), and right after the commit returned (all of it)
    append_trial(append_base, "at-commit", 0.0, "UPDATE 1")
    assert append_trial(append_base, "after-commit", 0.0, "UPDATED 1") == "all"


@pytest.mark.slow
@pytest.mark.ci_real
def test_append_killed_at_random_moments(append_base):
    rng = random.Random(1234)
    d = append_base.duration
    n = SLOW_TRIALS
    outcomes = [append_trial(append_base, f"r{i}", rng.uniform(0, 1.2 * d)) for i in range(n - n // 5)]
    outcomes += [append_trial(append_base, f"c{i}", rng.uniform(0, 0.01), "UPDATE 1") for i in range(n // 5)]
    outcomes.append(append_trial(append_base, "after-commit", 0.0, "UPDATED 1"))
    print(f"{len(outcomes)} appends killed: {outcomes.count('all')} whole, {outcomes.count('none')} absent")
    # each outcome agreed with the markers printed before the kill (append_trial); both kinds were seen
    assert "none" in outcomes and outcomes[-1] == "all"


def test_a_commit_reads_the_handles_leases_while_another_thread_takes_one(log):
    """An ingestion and a cleaning of the same log in one process may share a handle: a commit of one
    thread reads the handle's leases (to fence itself) while the other thread takes its lease. Here the
    other thread takes it at the worst moment, in the middle of that reading, and both go on."""
    reading, taken, release = threading.Event(), threading.Event(), threading.Event()

    def let_the_other_thread_in(lease) -> None:
        """This handle's clean lease only (not the class, nor any module): its check lets the
        ingestion take its lease in the middle of the commit's reading."""
        real_check = lease.check

        def check(committed_epoch: int) -> None:
            real_check(committed_epoch)
            if not reading.is_set():
                reading.set()
                assert taken.wait(30)

        lease.check = check

    def ingestion() -> None:
        assert reading.wait(30)
        with log.lock("append"):
            taken.set()
            release.wait(30)

    other = threading.Thread(target=ingestion)
    try:
        with log.lock("clean"):
            let_the_other_thread_in(log._held["clean"])
            other.start()
            committed = log.update(lambda m: m.with_(extra={**(m.extra or {}), "note": "both"}))
    finally:
        release.set()
        other.join(timeout=30)
    assert taken.is_set() and committed.extra["note"] == "both" and log.manifest().version == committed.version
    assert log.lock_holder("clean") is None and log.lock_holder("append") is None


def test_a_commit_that_loses_a_race_returns_none_and_the_next_try_reads_the_winner(tmp_path):
    """`attempts` and `commit`, the tries the engine drives itself (so the store never calls the cleaning
    back): a try whose version another writer committed first commits nothing, the next try starts from
    the winner's manifest, and the tries are bounded."""
    store = LogStore(str(tmp_path / "store"))
    mine, theirs = store.log("t-0"), store.log("t-0")
    tries = mine.attempts(retries=2)
    first = next(tries)
    theirs.update(lambda m: m.with_(invalid_records=1))  # the other writer takes the next version
    assert mine.commit(first, first.current.with_(invalid_records=5)) is None
    assert mine.manifest().invalid_records == 1  # the winner's commit stands
    second = next(tries)
    assert second.current.invalid_records == 1
    committed = mine.commit(second, second.current.with_(invalid_records=second.current.invalid_records + 5))
    assert committed.version == second.current.version + 1 and mine.manifest().invalid_records == 6
    assert mine.commit(second, None) is second.current  # nothing to commit: the try's manifest stands
    with pytest.raises(ConflictError, match="too many concurrent changes"):
        next(tries)
