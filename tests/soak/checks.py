"""The soak's end: wait until the deployment has taken in every landed file and its tables caught up, then
check everything against the producer's ledger (never against the product's own account of itself)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import dagster as dg

from compaction_assets.log.reader import iter_records
from compaction_assets.state.latest_state import latest_state_table
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.commit.expiry import remove_unreachable
from compaction_assets.table.reading.read import history, open_table, scan
from resources.log_store import LogStoreResource
from tests.log.test_s3_kill_trials import unreachable_table_objects, unreferenced_objects
from tests.soak.producer import Ledger

IN_FLIGHT = {"QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING"}


@dataclass
class Checked:
    """What the checks found; `problems` empty when the soak passed."""

    records_shown: int = 0  # records read back from the logs, each compared with the ledger
    state_rows: int = 0  # latest-state rows compared with the ledger's dedup
    table_rows: int = 0  # table rows compared with the latest states
    lost: int = 0  # landed records missing: not ingested, or a key's latest record absent
    duplicated: int = 0  # records shown more than once
    wrong: int = 0  # records shown that the ledger does not have at their offset
    uncleanable: int = 0
    orphans: int = 0  # objects no manifest or snapshot references, after garbage collection
    runs: dict[str, int] = field(default_factory=dict)  # the instance's runs by status
    problems: list[str] = field(default_factory=list)


def instance_runs(home: str) -> tuple[Counter, list[str]]:
    """The runs of the instance (PostgreSQL) by status, and one line for each run in flight."""
    with dg.DagsterInstance.from_config(home) as instance:
        runs = [r.dagster_run for r in instance.get_run_records()]
    flying = [
        f"run {r.run_id} {r.job_name} {r.status.value} "
        f"({r.tags.get('dagster/partition') or r.tags.get('compaction/logs')})"
        for r in runs
        if r.status.value in IN_FLIGHT
    ]
    return Counter(r.status.value for r in runs), flying


def lagging(resource: LogStoreResource, ledger: Ledger, logs: list[str]) -> list[str]:
    """The logs that have not taken in every landed record, or whose table does not reflect the log's
    current version (one line each)."""
    store, out = resource.store, []
    snapshots: dict[str, dict[str, int]] = {}
    for log in logs:
        handle = store.log(log)
        m = handle.manifest() if handle.exists() else None
        leo, wanted = (m.log_end_offset if m else 0), ledger.next_offset(log)
        if leo != wanted:
            out.append(f"{log}: log end offset {leo} of {wanted} landed")
            continue
        topic = parse_log_name(log)[0]
        if topic not in snapshots:
            table, _ = open_table(store.storage, topic)
            done = history(table)
            snapshots[topic] = done[-1].log_versions if done else {}
        if m is not None and snapshots[topic].get(log) != m.version:
            out.append(f"{log}: table at version {snapshots[topic].get(log)} of {m.version}")
    return out


def settle(resource: LogStoreResource, ledger: Ledger, logs: list[str], home: str, timeout: float) -> list[str]:
    """Wait until every file is in, every table caught up and no run is in flight, twice 10 s apart; what is
    still wrong when `timeout` passes (empty when settled)."""
    deadline, calm = time.monotonic() + timeout, 0
    why: list[str] = []
    while time.monotonic() < deadline:
        try:
            why = lagging(resource, ledger, logs) + instance_runs(home)[1]
        except Exception as exc:  # a server still coming back: not settled yet
            why = [f"not readable yet: {str(exc).splitlines()[0][:200]}"]
        calm = calm + 1 if not why else 0
        if calm >= 2:
            return []
        time.sleep(10)
    return why


def check_log(resource: LogStoreResource, ledger: Ledger, log: str, out: Checked) -> list[dict]:
    """The log against the ledger; returns its latest state's rows (key, offset, value)."""
    handle = resource.store.log(log)
    m = handle.manifest()
    if m.uncleanable is not None:
        out.uncleanable += 1
        out.problems.append(f"{log}: marked uncleanable: {m.uncleanable}")
    landed = ledger.records.get(log, {})
    shown = [(r.offset, r.key, r.value) for r in iter_records(handle)]
    out.records_shown += len(shown)
    offsets = Counter(o for o, _, _ in shown)
    out.duplicated += sum(n - 1 for n in offsets.values())
    wrong = [o for o, k, v in shown if landed.get(o) != (k, v)]
    out.wrong += len(wrong)
    present = set(offsets)
    missing = [o for _, (o, _) in ledger.latest(log).items() if o not in present]
    out.lost += len(missing) + max(0, len(landed) - m.log_end_offset)
    if wrong or missing or len(offsets) != len(shown) or m.log_end_offset != len(landed):
        out.problems.append(
            f"{log}: log end offset {m.log_end_offset} of {len(landed)} landed; {len(wrong)} records not the "
            f"ledger's (e.g. {wrong[:3]}), {len(missing)} keys' latest records missing (e.g. {missing[:3]}), "
            f"{len(shown) - len(offsets)} shown twice"
        )
    state = latest_state_table(handle, resource.config_for(log), m).to_pylist()
    expected = {k: (o, v) for k, (o, v) in ledger.latest(log).items() if v is not None}
    got = {r["key"]: (r["offset"], r["value"]) for r in state}
    out.state_rows += len(state)
    if got != expected or len(state) != len(got):
        diff = sorted(set(got.items()) ^ set(expected.items()))[:3]
        out.problems.append(f"{log}: latest state != the ledger's dedup ({len(got)} against {len(expected)}: {diff})")
    return state


def check_table(resource: LogStoreResource, log: str, state: list[dict], out: Checked) -> None:
    topic, partition = parse_log_name(log)
    table, _ = open_table(resource.store.storage, topic)
    rows = scan(table, partition=partition).to_pylist()
    out.table_rows += len(rows)
    got = sorted((r["key"], r["offset"], r["value"]) for r in rows)
    wanted = sorted((r["key"], r["offset"], r["value"]) for r in state)
    if got != wanted:
        out.problems.append(f"{log}: table != latest state ({len(got)} rows against {len(wanted)})")


def check_garbage(resource: LogStoreResource, logs: list[str], out: Checked) -> None:
    """Garbage collection of every log and of every table's unreachable files; nothing may be left over."""
    store = resource.store
    for log in logs:
        handle = store.log(log)
        handle.collect_garbage(grace_s=0)
        left = unreferenced_objects(handle)
        out.orphans += len(left)
        if left:
            out.problems.append(f"{log}: {len(left)} unreferenced objects after gc, e.g. {left[:3]}")
    for topic in sorted({parse_log_name(log)[0] for log in logs}):
        table, _ = open_table(store.storage, topic)
        remove_unreachable(table, now_ms=int(time.time() * 1000), grace_ms=0)
        left = unreachable_table_objects(table)
        out.orphans += len(left)
        if left:
            out.problems.append(f"table of {topic}: {len(left)} unreachable objects after their removal: {left[:3]}")


def check_all(ledger: Ledger, logs: list[str], home: str) -> Checked:
    """Every check, with the daemon stopped (nothing changes under them)."""
    resource, out = LogStoreResource(), Checked()
    runs, flying = instance_runs(home)
    out.runs = dict(runs)  # a plain dict: dataclasses.asdict rebuilds a Counter from pairs, counting them
    out.problems += flying
    for log in logs:
        state = check_log(resource, ledger, log, out)
        check_table(resource, log, state, out)
    check_garbage(resource, logs, out)
    return out
