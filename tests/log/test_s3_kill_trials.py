"""Kill trials with the store on the S3 server (SeaweedFS, tests/s3_server.py): cleanings, appends and
Dagster runs of one log SIGKILLed at random moments, with acknowledged appends between the trials.

After each trial every record the log shows is one a commit made visible, at its offset, once; the latest
record of every key ever committed is there; the log is not marked uncleanable (a kill is a machine fault,
not a fault of the log's data). After a killed Dagster run, its topic's table and its instance too: the
table holds only committed records, each key once, at a version of the log no newer than its manifest (and
the latest state itself when it reflects the manifest); every cleaning and table commit the instance
recorded is one the log and the table have. At the end one cleaning must leave exactly the latest record
per key, as the test's own dedup of everything committed computes it (its ledger is built from the batches
the test generated, never from the product's reader), and after garbage collection (the log's, and the
table's removal of unreachable files) no object on the bucket is one nothing references.

KILL_TRIALS kills (30 with `slow`, CI's real-system suite sets fewer), after one uncut run of each kind;
at least half of each kind's kills must land mid-way (before the work ended): a kill that came after is
followed by a trial of its kind timed by what it took, until the minimum is met or the trials run out
(twice the planned number). The subprocess side is tests/fault_helpers.py; the process plumbing and lease
waits are test_store_faults.py's, shared rather than copied.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import pytest

from compaction_assets.cleaning import engine
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.table.commit.expiry import REMOVABLE, reachable_files, remove_unreachable
from compaction_assets.table.reading.read import history, open_table, scan
from compaction_assets.topics.config import build_config
from tests.fault_helpers import batch
from tests.log.test_store_faults import SLOW_TRIALS, Helper, wait_lease_expiry

LOG = "s3kill-0"
CONF = {"segment.bytes": 16_000, "min.cleanable.dirty.ratio": 0.01}
NOW = 2_000_000  # every cleaning's clock (tombstones stay: the retention is a day)
TTL_S = 5.0  # the helpers' leases: a killed holder's lease expires soon, a live one's
# heartbeat (every TTL/3) keeps it on a machine loaded 20 deep
APPEND_N = 20_000  # a killed append's batch: many segments, so many objects written before its commit
BETWEEN_N = 400  # the acknowledged append before each trial
KINDS = ("clean", "append", "dagster")
EXPECTED_SPAN_S = {"clean": 10.0, "append": 4.0, "dagster": 25.0}  # until an uncut run of the kind is timed


@dataclass
class Ledger:
    """Every record a commit made visible, by offset, as the test generated it."""

    records: dict[int, tuple[bytes, bytes | None]] = field(default_factory=dict)

    def add(self, first_offset: int, rows: list[dict]) -> None:
        for i, row in enumerate(rows):
            self.records[first_offset + i] = (row["key"].encode(), row["value"])

    def latest(self) -> dict[bytes, tuple[int, bytes | None]]:
        """The independent dedup (SPEC, offset strategy): the record of highest offset for each key."""
        out: dict[bytes, tuple[int, bytes | None]] = {}
        for offset in sorted(self.records):
            key, value = self.records[offset]
            out[key] = (offset, value)
        return out


@dataclass
class Tally:
    trials: int = 0
    kills: int = 0
    finished_first: int = 0
    appends_whole: int = 0
    appends_absent: int = 0
    records_checked: int = 0
    table_rows_checked: int = 0
    spans: dict[str, float] = field(default_factory=lambda: dict(EXPECTED_SPAN_S))
    midway: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))  # kills before the end


@pytest.fixture
def s3_log(s3_store_uri, tmp_path, monkeypatch):
    """A log on a fresh bucket, and the COMPACTION_* and DAGSTER_HOME a Dagster run of it reads."""
    defaults = ", ".join(f"{k}: {v}" for k, v in CONF.items())
    (tmp_path / "topics.yaml").write_text(f"defaults: {{{defaults}}}\ntopics:\n  s3kill: {{}}\n")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    for name, value in {
        "COMPACTION_STORE": s3_store_uri,
        "COMPACTION_TOPICS": str(tmp_path / "topics.yaml"),
        "COMPACTION_LANDING": str(tmp_path / "landing"),
        "DAGSTER_HOME": str(home),
        "COMPACTION_LATEST_STATE": str(tmp_path / "latest"),
        "COMPACTION_LOCK_TTL_SECONDS": str(TTL_S),
        # the topic tables' catalog in the test's own folder, not under ./var/tables
        "COMPACTION_TABLE_CATALOG_URI": f"sqlite:///{tmp_path}/catalog.db",
    }.items():
        monkeypatch.setenv(name, value)
    return LogStore(s3_store_uri, lock_ttl_s=TTL_S, gc_grace_s=0).log(LOG)


def acknowledged_append(handle, ledger: Ledger, n: int, seed: int) -> None:
    rows = batch(n, seed)
    before = handle.manifest().log_end_offset if handle.exists() else 0
    result = writer.append(handle, build_config(CONF), rows)
    assert result.records == n and result.log_end_offset == before + n
    ledger.add(before, rows)


def start_helper(kind: str, uri: str, seed: int, logs: Path) -> Helper:
    args = {
        "clean": ["clean", uri, LOG, str(NOW), json.dumps(CONF), "--ttl", str(TTL_S), "--gate"],
        "append": ["append", uri, LOG, json.dumps(CONF), str(APPEND_N), str(seed), "--ttl", str(TTL_S)],
        "dagster": ["materialize", LOG, str(NOW), "--gate"],
    }[kind]
    return Helper(args, logs)


def kill_or_finish(helper: Helper, kind: str, delay: float | None, tally: Tally) -> None:
    """Open the gate, then SIGKILL `delay` seconds after START (None: let it finish and time it)."""
    assert helper.wait_for("READY") is not None, helper.stderr()[-3000:]
    if kind != "append":
        helper.go()
    assert helper.wait_for("START") is not None, helper.stderr()[-3000:]
    if delay is None:
        assert helper.finish() == 0, helper.stderr()[-3000:]
        assert helper.seen("DONE") is not None, helper.lines[-5:]
        tally.spans[kind] = helper.seen("DONE") - helper.seen("START")
        if kind == "dagster":
            done = json.loads(helper.lines[-1][1].split(" ", 1)[1])
            assert done["success"], f"{done['errors']} {helper.stderr()[-3000:]}"
        return
    time.sleep(delay)
    alive = helper.proc.poll() is None
    helper.kill()
    midway = alive and helper.seen("DONE") is None
    tally.kills += midway
    tally.midway[kind] += midway
    tally.finished_first += not midway
    done = helper.seen("DONE")
    if done is not None:  # a warm run outpaced the timed one: later trials of the kind aim within this
        tally.spans[kind] = min(tally.spans[kind], done - helper.seen("START"))


def settle_append(handle, ledger: Ledger, before: int, seed: int, helper: Helper, tally: Tally) -> None:
    """A killed append is all or nothing, and agrees with the markers it printed before its kill."""
    leo = handle.manifest().log_end_offset
    where = f"append seed {seed}: {[line for _, line in helper.lines]}"
    assert leo in (before, before + APPEND_N), where
    if leo == before + APPEND_N:
        ledger.add(before, batch(APPEND_N, seed))
        tally.appends_whole += 1
        assert helper.seen("UPDATE 1") is not None, where  # nothing commits before its commit starts
    else:
        tally.appends_absent += 1
        assert helper.seen("UPDATED 1") is None, where  # a commit that returned is visible


def check_log(handle, ledger: Ledger, where: str, tally: Tally) -> list[tuple[int, bytes, bytes | None]]:
    """Every record shown is a committed one at its offset, once; every key's latest committed record is there."""
    m = handle.manifest()
    assert m.uncleanable is None, f"{where}: a kill marked the log: {m.uncleanable}"
    shown = [(r.offset, r.key, r.value) for r in iter_records(handle)]
    offsets = [offset for offset, _, _ in shown]
    assert offsets == sorted(set(offsets)), f"{where}: offsets repeated or out of order"
    wrong = [(o, k, v) for o, k, v in shown if ledger.records.get(o) != (k, v)]
    assert not wrong, f"{where}: records no commit made: {wrong[:5]}"
    present = set(offsets)
    lost = [(key, offset) for key, (offset, _) in ledger.latest().items() if offset not in present]
    assert not lost, f"{where}: {len(lost)} keys lost their latest record, e.g. {lost[:5]}"
    tally.records_checked += len(shown)
    return shown


def minimum_midway(trials: int) -> int:
    """Kills of each kind that must land mid-way: half of the kind's planned ones (at least one)."""
    return max(1, trials // len(KINDS) // 2)


def trial_plan(trials: int, rng: random.Random) -> list[tuple[str, float | None]]:
    """One uncut run of each kind (timing it), then `trials` kills over the kinds in turn, each at a random
    fraction of its kind's span."""
    return [(kind, None) for kind in KINDS] + [(KINDS[i % 3], rng.random()) for i in range(trials)]


def more_trials(tally: Tally, trials: int, rng: random.Random):
    """After the plan, trials of the kinds short of their minimum of mid-way kills, aimed within the first
    60% of their span, until each has it or `trials` more were run."""
    for _ in range(trials):
        short = [kind for kind in KINDS if tally.midway[kind] < minimum_midway(trials)]
        if not short:
            return
        yield short[0], rng.uniform(0.05, 0.6)


def run_trials(handle, uri: str, work: Path, trials: int, spark) -> Tally:
    """`trials` kills over the three kinds in turn, after one uncut run of each kind (which times it), and
    more while a kind is short of its mid-way kills."""
    rng, ledger, tally = random.Random(3434), Ledger(), Tally()
    acknowledged_append(handle, ledger, 3000, seed=1)
    number = 0
    for kind, fraction in trial_plan(trials, rng):
        one_trial(handle, uri, work, ledger, tally, number, kind, fraction)
        number += 1
    for kind, fraction in more_trials(tally, trials, rng):  # lazily: each reads the tally the last left
        one_trial(handle, uri, work, ledger, tally, number, kind, fraction)
        number += 1
    acknowledged_append(handle, ledger, BETWEEN_N, seed=99)
    writer.roll(handle)
    assert engine.run(handle, build_config(CONF), NOW, spark=spark, force=True).cleaned
    final = check_log(handle, ledger, "after the final cleaning", tally)
    expected = sorted((offset, key, value) for key, (offset, value) in ledger.latest().items())
    assert final == expected, "the final cleaning differs from the dedup of every committed record"
    handle.collect_garbage(grace_s=0)
    assert unreferenced_objects(handle) == [], "objects of the log left after its garbage collection"
    table, _ = open_table(handle.st, TOPIC)
    remove_unreachable(table, now_ms=int(time.time() * 1000), grace_ms=0)
    assert unreachable_table_objects(table) == [], "objects of the table left after its unreachable files went"
    return tally


def one_trial(handle, uri, work, ledger, tally, number: int, kind: str, fraction: float | None) -> None:
    """One helper of `kind`, uncut (None) or killed at `fraction` of its span, then everything checked."""
    acknowledged_append(handle, ledger, BETWEEN_N, seed=1000 + number)
    before, seed = handle.manifest().log_end_offset, 5000 + number
    runs_before = len(dagster_runs()) if kind == "dagster" else 0
    helper = start_helper(kind, uri, seed, work / "logs")
    delay = None if fraction is None else fraction * 1.1 * tally.spans[kind]
    kill_or_finish(helper, kind, delay, tally)
    tally.trials += fraction is not None
    if kind == "append":
        settle_append(handle, ledger, before, seed, helper, tally)
    else:
        assert handle.manifest().log_end_offset == before, helper.lines
    for lease in ("clean", "append"):
        wait_lease_expiry(handle, lease)
    where = f"trial {number} ({kind}, delay {delay})"
    check_log(handle, ledger, where, tally)
    if kind == "dagster":
        # the instance reads back after the kill, the run recorded unless killed before it began
        assert runs_before <= len(dagster_runs()) <= runs_before + 1, where
        check_table(handle, ledger, where, tally)
        check_instance(handle, where)


TOPIC = LOG.rsplit("-", 1)[0]


def dagster_runs() -> list:
    """The runs of the helpers' instance (DAGSTER_HOME), newest first."""
    with dg.DagsterInstance.get() as instance:
        return list(instance.get_runs())


def check_table(handle, ledger: Ledger, where: str, tally: Tally) -> None:
    """The topic's table after a Dagster run (killed or not): only committed records, each key once, at a
    version of the log no newer than its manifest; the latest state itself when it reflects the manifest."""
    table, _ = open_table(handle.st, TOPIC)
    rows = scan(table, None, 0).to_pylist()
    keys = [r["key"] for r in rows]
    assert len(keys) == len(set(keys)), f"{where}: a key twice in the table"
    wrong = [(r["offset"], r["key"]) for r in rows if ledger.records.get(r["offset"]) != (r["key"], r["value"])]
    assert not wrong, f"{where}: table rows no commit made: {wrong[:5]}"
    snapshots = history(table)
    version = snapshots[-1].log_versions.get(LOG, 0) if snapshots else 0
    assert version <= handle.manifest().version, f"{where}: the table reflects a version the log never had"
    if version == handle.manifest().version:
        expected = {key: (offset, value) for key, (offset, value) in ledger.latest().items() if value is not None}
        assert {r["key"]: (r["offset"], r["value"]) for r in rows} == expected, f"{where}: table != latest state"
    tally.table_rows_checked += len(rows)


def check_instance(handle, where: str) -> None:
    """Every cleaning the instance recorded of the log is one its manifests had; every table commit it
    recorded is a snapshot of the table."""
    current = handle.manifest().version
    table, _ = open_table(handle.st, TOPIC)
    committed = {s.log_versions.get(LOG) for s in history(table)}
    with dg.DagsterInstance.get() as instance:
        for asset in ("compacted_log", "latest_state"):
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(asset), asset_partitions=[LOG]), limit=1000
            ).records
            for record in records:
                meta = {k: v.value for k, v in record.asset_materialization.metadata.items()}
                if asset == "compacted_log" and meta.get("cleaned"):
                    assert meta["before_version"] < meta["after_version"] <= current, (where, meta)
                if asset == "latest_state" and "table_log_versions" in meta:
                    assert meta["table_log_versions"][LOG] in committed, (where, meta["table_log_versions"])


def unreferenced_objects(handle) -> list[str]:
    """Objects under the log's prefix that are neither a manifest, nor a pin of manifest versions (the
    checks' own), nor referenced by a recent manifest."""
    keep = {handle.path(name) for name in handle.referenced()}
    left = []
    for path in handle.st.list_files_recursive(handle.dir):
        relative = path[len(handle.dir) + 1 :]
        if relative.startswith(("_log/", "_pins/")) and relative.endswith(".json") and "/.tmp-" not in path:
            continue
        if path in keep or any(path.startswith(k + "/") for k in keep):
            continue
        left.append(relative)
    return left


def unreachable_table_objects(table) -> list[str]:
    """The table's data and manifest objects that no snapshot reaches (what `remove_unreachable` removes)."""
    store = Storage.open(table.location())
    keep = reachable_files(table)
    return [
        path
        for path in store.list_files_recursive(store.root)
        if path not in keep and path[len(store.root) :].startswith(REMOVABLE) and not path.endswith(".metadata.json")
    ]


def report(tally: Tally, started: float) -> str:
    return (
        f"S3 kill trials: {tally.trials} trials, {tally.kills} killed mid-way {tally.midway} "
        f"({tally.finished_first} had finished first), appends {tally.appends_whole} whole / "
        f"{tally.appends_absent} absent, {tally.records_checked} records and {tally.table_rows_checked} "
        f"table rows checked, {time.monotonic() - started:.0f} s"
    )


@pytest.mark.slow
@pytest.mark.ci_real
def test_cleanings_appends_and_dagster_runs_killed_on_s3(s3_log, s3_store_uri, tmp_path, spark):
    started = time.monotonic()
    tally = run_trials(s3_log, s3_store_uri, tmp_path, SLOW_TRIALS, spark)
    print(report(tally, started))
    # the delays span the work's timed length, and a kind short of mid-way kills gets more trials
    assert all(n >= minimum_midway(SLOW_TRIALS) for n in tally.midway.values()), report(tally, started)
