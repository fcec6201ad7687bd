"""Ingestion under faults (SPEC §1 all or nothing per input, §7.4 a crash loses nothing acknowledged):

- `python -m compaction_assets ingest` SIGKILLed at random moments read from its own progress lines: the
  log stays valid, every landing file is in it whole or not at all (no partial file, no duplicate), and re-running the
  ingestion completes it exactly once;
- ingestion and cleaning of the same log at the same time: nothing lost, nothing duplicated, compared
  with an oracle computed from the landing files.
"""

from __future__ import annotations

import base64
import contextlib
import io
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compaction_assets import cli
from compaction_assets.cleaning import engine
from compaction_assets.ingest.landing import ingest
from compaction_assets.store.log_store import LogStore, wall_ms
from compaction_assets.topics.config import build_config
from tests.log.test_store_faults import (
    check_layout,
    latest_state,
    only_referenced_data_left,
    referenced_files_exist,
    wait_lease_expiry,
)

REPO = Path(__file__).resolve().parents[2]
LOG = "events-0"
TOPICS = "defaults: {segment.bytes: 8000}\ntopics: {events: {min.cleanable.dirty.ratio: 0.01}}\n"
FILES = 12
ROWS = 700
KILL_TRIALS = int(os.environ.get("INGEST_KILL_TRIALS", "10"))
CFG0 = build_config({})
SLOW_KILL_TRIALS = int(os.environ.get("KILL_TRIALS", "40"))


def cli_quiet(*args: str) -> int:
    """The real CLI, in this process (stdout swallowed; errors still reach stderr)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return cli.main(list(args))


# --- the landing area and its oracle ------------------------------------------------------------------


def _rows(rng: random.Random, file_no: int, n: int) -> list[dict]:
    out = []
    for i in range(n):
        key = f"user-{rng.randrange(400):04d}".encode()
        if rng.random() < 0.1:
            key = bytes([0xFF, rng.randrange(256)]) + key  # not UTF-8
        value = None if rng.random() < 0.05 else rng.randbytes(rng.randrange(0, 24)) + f"|{file_no}:{i}".encode()
        out.append(
            {
                "key": key,
                "value": value,
                "timestamp": 1_000 + file_no * 10 + i % 7,
                "headers": [("src", f"f{file_no}".encode())] if i % 3 == 0 else [],
            }
        )
    return out


def write_landing_file(folder: Path, file_no: int, rows: list[dict]) -> Path:
    """Even files as JSON Lines (bytes that are not UTF-8 as key_b64 / value_b64), odd ones as Parquet."""
    folder.mkdir(parents=True, exist_ok=True)
    if file_no % 2 == 0:
        path = folder / f"part-{file_no:04d}.jsonl"
        lines = []
        for r in rows:
            obj: dict = {
                "timestamp": r["timestamp"],
                "headers": [[n, {"b64": base64.b64encode(v).decode()}] for n, v in r["headers"]],
            }
            for name in ("key", "value"):
                v = r[name]
                if v is None:
                    obj[name] = None
                else:
                    try:
                        obj[name] = v.decode("utf-8")
                    except UnicodeDecodeError:
                        obj[f"{name}_b64"] = base64.b64encode(v).decode()
            lines.append(json.dumps(obj))
        tmp = folder / f".{path.name}.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        tmp.rename(path)  # a sink publishes whole files
    else:
        path = folder / f"part-{file_no:04d}.parquet"
        table = pa.table(
            {
                "key": pa.array([r["key"] for r in rows], pa.binary()),
                "value": pa.array([r["value"] for r in rows], pa.binary()),
                "timestamp": pa.array([r["timestamp"] for r in rows], pa.int64()),
                "headers": pa.array(
                    [[{"name": n, "value": v} for n, v in r["headers"]] for r in rows],
                    pa.list_(pa.struct([("name", pa.string()), ("value", pa.binary())])),
                ),
            }
        )
        tmp = folder / f".{path.name}.tmp"
        pq.write_table(table, tmp)
        tmp.rename(path)
    return path


def oracle_records(files: list[list[dict]]) -> list[tuple]:
    """(offset, key, value, timestamp, headers) of the rows written to the files, appended in order to an
    empty log: from the rows this test generated, not read back through the product."""
    out = []
    for rows in files:
        for r in rows:
            out.append((len(out), r["key"], r["value"], r["timestamp"], [(n, v) for n, v in r["headers"]]))
    return out


def _json_bytes(obj: dict, name: str) -> bytes | None:
    if f"{name}_b64" in obj:
        return base64.b64decode(obj[f"{name}_b64"])
    return None if obj[name] is None else obj[name].encode("utf-8")


def read_back(path: Path) -> list[tuple]:
    """(key, value, timestamp, headers) of a landing file, read with json or pyarrow alone."""
    if path.suffix == ".jsonl":
        objs = [json.loads(line) for line in path.read_text().splitlines()]
        return [
            (
                _json_bytes(o, "key"),
                _json_bytes(o, "value"),
                o["timestamp"],
                [(n, base64.b64decode(v["b64"])) for n, v in o["headers"]],
            )
            for o in objs
        ]
    return [
        (r["key"], r["value"], r["timestamp"], [(h["name"], h["value"]) for h in r["headers"]])
        for r in pq.read_table(path).to_pylist()
    ]


def as_tuples(records) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in records]


@pytest.fixture(scope="module")
def landing(tmp_path_factory):
    return write_kill_landing(tmp_path_factory.mktemp("ingest-kill"))


def write_kill_landing(root: Path):
    """The landing area of the kill trials under `root` (with its topics file): the root, the files' names,
    the oracle's records and the records after each file."""
    folder = root / "landing" / "events" / "partition=0"
    rng = random.Random(4242)
    files = [_rows(rng, i, ROWS) for i in range(FILES)]
    paths = [write_landing_file(folder, i, rows) for i, rows in enumerate(files)]
    (root / "topics.yaml").write_text(TOPICS)
    # independently of the product's reader (json and pyarrow directly): the files hold the rows written
    for path, rows in zip(paths, files):
        assert read_back(path) == [
            (r["key"], r["value"], r["timestamp"], list(map(tuple, r["headers"]))) for r in rows
        ], path
    expected = oracle_records(files)
    ends = list(itertools.accumulate(len(rows) for rows in files))  # records after the first k files
    return root, [p.name for p in paths], expected, ends


class Ingestion:
    """`python -m compaction_assets ingest [flags]` in its own process group, with a 0.5 s lease."""

    def __init__(self, root: Path, store: Path, *flags: str):
        env = dict(os.environ, COMPACTION_LOCK_TTL_SECONDS="0.5", PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "compaction_assets",
                "--store",
                str(store),
                "--topics",
                str(root / "topics.yaml"),
                "ingest",
                "--landing",
                str(root / "landing"),
                *flags,
            ],
            cwd=str(REPO),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[tuple[float, str]] = []
        self.started = threading.Event()
        self.begun = 0  # the files the process has said it begins ("ingesting NAME (n/FILES)")
        self.progressed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))
            if "ingesting" in line:
                self.started.set()
                with self.progressed:
                    self.begun += 1
                    self.progressed.notify_all()
        self.started.set()
        with self.progressed:
            self.begun = FILES + 1  # the process ended: no more files begin
            self.progressed.notify_all()

    def wait_begun(self, n: int, timeout: float = 120) -> None:
        """Wait until the process begins its n-th file: files 1..n-1 are committed (each is printed before
        it is appended, and appended before the next is printed)."""
        with self.progressed:
            assert self.progressed.wait_for(lambda: self.begun >= n, timeout), self.lines

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)


def calibrate(landing, tmp_path) -> float:
    root = landing[0]
    run = Ingestion(root, tmp_path / "calibrate")
    assert run.proc.wait(timeout=120) == 0, run.lines
    run._reader.join(timeout=10)
    first = next(t for t, line in run.lines if "ingesting" in line)
    return max(run.lines[-1][0] - first, 0.2)


def kill_trial(landing, store: Path, delay: float, after_files: int = 0) -> int:
    """Start an ingestion, SIGKILL it `delay` s after it begins file `after_files + 1` (the moment read
    from its own progress line, not a clock), check, re-run. Returns how many files it had committed."""
    root, names, expected, ends = landing
    run = Ingestion(root, store)
    assert run.started.wait(60), run.lines
    run.wait_begun(after_files + 1)
    time.sleep(delay)
    run.kill()
    where = f"kill {delay:.3f}s after file {after_files + 1} began; stderr {[line for _, line in run.lines][-4:]}"

    h = LogStore(str(store), gc_grace_s=0).log(LOG)
    m = h.manifest()
    k = len(m.ingested)
    assert k >= after_files, where  # what it said it had done is there
    assert list(m.ingested) == names[:k], where  # a prefix, in order, each once
    n = ends[k - 1] if k else 0
    assert m.log_end_offset == n, where
    assert as_tuples(check_layout(h, m)) == expected[:n], where  # whole files only
    referenced_files_exist(h)

    wait_lease_expiry(h, "append")  # the dead ingestion's 0.5 s lease
    assert (
        cli_quiet(
            "--store", str(store), "--topics", str(root / "topics.yaml"), "ingest", "--landing", str(root / "landing")
        )
        == 0
    ), where
    m2 = h.manifest()
    assert list(m2.ingested) == names, where
    assert as_tuples(check_layout(h, m2)) == expected, where
    h.collect_garbage(grace_s=0)  # leftovers of the killed append go
    only_referenced_data_left(h)
    referenced_files_exist(h)
    # once more: nothing is appended twice
    assert cli_quiet("--store", str(store), "ingest", "--landing", str(root / "landing")) == 0
    assert h.manifest().version == m2.version, where
    return k


def kill_moments(rng: random.Random, trials: int, per_file: float) -> list[tuple[int, float]]:
    """(files begun before the kill's file, seconds into that file) for each trial: the first at the very
    start, the others spread over every file of the run (a clock alone, on a loaded machine, missed it)."""
    files = [rng.randrange(FILES) for _ in range(trials - 1)]
    return [(0, 0.0)] + [(f, rng.uniform(0, 1.2 * per_file)) for f in files]


def run_kill_trials(landing, tmp_path, seed: int, trials: int) -> list[int]:
    """Kill trials at moments read from the ingestion's progress; the files each had committed."""
    per_file = calibrate(landing, tmp_path) / FILES
    moments = kill_moments(random.Random(seed), trials, per_file)
    committed = [kill_trial(landing, tmp_path / f"trial-{i}", delay, after) for i, (after, delay) in enumerate(moments)]
    print(f"files committed when killed, per trial: {committed}")
    return committed


def test_ingestion_killed_at_random_moments(landing, tmp_path):
    committed = run_kill_trials(landing, tmp_path, 31337, KILL_TRIALS)
    # the trials did land in the middle of the ingestion, not only before or after it
    assert any(0 < k < FILES for k in committed), committed


@pytest.mark.slow
@pytest.mark.ci_real
def test_ingestion_killed_at_many_more_moments(landing, tmp_path):
    committed = run_kill_trials(landing, tmp_path, 8, SLOW_KILL_TRIALS)
    # kills landed in the middle of the ingestion, at several different moments when there are many
    mid_way = {k for k in committed if 0 < k < FILES}
    assert len(mid_way) >= (3 if SLOW_KILL_TRIALS >= 30 else 1), committed


# --- ingestion and cleaning of the same log at the same time --------------------------------------------

CONCURRENT_CONF = {
    "segment.bytes": 4000,
    "min.cleanable.dirty.ratio": 0.01,
    "delete.retention.ms": 0,
    "max.compaction.lag.ms": 100,
}


def test_ingestion_and_cleaning_at_the_same_time(tmp_path, spark):
    """A sink lands files while one thread ingests them and another cleans the log, for several rounds;
    cleanings seal the active segment by deadline (max.compaction.lag.ms is tiny) and remove expired
    tombstones at once (delete.retention.ms 0), so they touch what the appends touch."""
    config = build_config(CONCURRENT_CONF)
    folder = tmp_path / "landing" / "events" / "partition=0"
    handle = LogStore(str(tmp_path / "store"), gc_grace_s=0).log(LOG)
    rng = random.Random(77)
    rounds, per_round = 3, 2
    paths: list[Path] = []
    generated: list[list[dict]] = []  # the rows of each file, as this test made them
    errors: list[BaseException] = []
    ingesting = threading.Event()
    ingesting.set()
    cleanings = []

    started = threading.Condition()
    n_started = [0]

    def sink_and_ingest() -> None:
        try:
            for r in range(rounds):
                with started:  # each round lands while the r-th cleaning runs (prepare, decide, rewrite)
                    assert started.wait_for(lambda round_=r: n_started[0] >= round_ or errors, timeout=300)
                for _ in range(per_round):
                    rows = _rows(rng, len(paths), 300)
                    paths.append(write_landing_file(folder, len(paths), rows))
                    generated.append(rows)
                time.sleep(rng.uniform(0, 1.0))
                ingest(handle, config, folder)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            ingesting.clear()

    def clean_repeatedly() -> None:
        try:
            while ingesting.is_set():
                if not handle.exists():
                    time.sleep(0.02)
                    continue
                with started:
                    n_started[0] += 1
                    started.notify_all()
                cleanings.append(engine.run(handle, config, wall_ms(), spark=spark))
        except BaseException as exc:
            errors.append(exc)
            with started:
                started.notify_all()

    threads = [threading.Thread(target=sink_and_ingest), threading.Thread(target=clean_repeatedly)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert sum(1 for c in cleanings if c.cleaned) >= 2, "the cleanings must have overlapped the ingestion"
    final = engine.run(handle, config, wall_ms(), spark=spark, force=True)
    assert final.cleaned

    expected = oracle_records(generated)
    m = handle.manifest()
    assert list(m.ingested) == [p.name for p in paths]  # each file once
    assert m.log_end_offset == len(expected)
    got = as_tuples(check_layout(handle, m))
    by_offset = {r[0]: r for r in expected}
    for rec in got:  # nothing altered, nothing invented
        assert by_offset[rec[0]] == rec, rec
    winners: dict[bytes, tuple] = {}
    for rec in expected:
        winners[rec[1]] = rec
    live = {k: (r[0], r[2]) for k, r in winners.items() if r[2] is not None}
    assert latest_state(spark, handle, config) == live  # SPEC §7.5 against the oracle
    kept = {r[0] for r in got}
    assert all(r[0] in kept for r in live.values())  # every winner survives
    # every record at or above the checkpoint (the uncleaned head) is still there (SPEC §7.1)
    assert [r for r in got if r[0] >= m.checkpoint] == [r for r in expected if r[0] >= m.checkpoint]
    referenced_files_exist(handle)


def test_garbage_collection_spares_the_files_of_an_append_in_flight(tmp_path):
    """A cleaning collects leftovers first. Files an append has written but not committed yet are not
    leftovers while its lease is live, however long it takes (found by the test above with a zero grace
    period: a cleaning deleted an in-flight append's files, which it then committed, referencing them)."""
    handle = LogStore(str(tmp_path / "store"), gc_grace_s=0).log(LOG)
    ingest_dir = tmp_path / "landing" / "events" / "partition=0"
    write_landing_file(ingest_dir, 0, _rows(random.Random(1), 0, 20))
    ingest(handle, CFG0, ingest_dir)
    leftover = Path(handle.path("data/leftover.parquet"))
    in_flight = Path(handle.path("data/in-flight.parquet"))
    pq.write_table(pa.table({"x": [1]}), leftover)
    hour_ago = time.time() - 3600
    os.utime(leftover, (hour_ago, hour_ago))  # a leftover of a change that died long ago
    with handle.lock("append", ttl_s=0.5, purpose="a slow append"):
        pq.write_table(pa.table({"x": [1]}), in_flight)
        first = handle.lock_holder("append").expires_ms
        while wall_ms() <= first + 100:  # past the first lease's expiry, as the store says
            time.sleep(0.05)
        assert handle.lock_holder("append").expires_ms > first  # renewed by the heartbeat: still held
        assert handle.collect_garbage(grace_s=0) == [str(leftover)]
        assert in_flight.exists()
    assert handle.collect_garbage(grace_s=0) == [str(in_flight)]  # the lease is gone: a leftover now
    referenced_files_exist(handle)
