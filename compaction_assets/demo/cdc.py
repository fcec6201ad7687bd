"""The demo's change-data-capture topic: a PostgreSQL `users` table captured by Debezium and landed by
Confluent's S3 sink, as they write it (docs/connectors.md).

Sink settings: JSON values (JsonConverter, schemas.enable=false) with `InsertField$Value` adding
`kafka_offset` and `kafka_ts`, `store.kafka.keys=true` (`<topic>+<p>+<start>.keys.json` beside each value
file), `behavior.on.null.values=write` (Debezium's tombstone after each delete goes to
`<topic>/tombstone/`), `flush.size=50`. Some changes reach the partition after a later change to the same
row (a connector restart re-sending a stretch): only `source.lsn` orders them (topics.yaml: `users-cdc`).
One row, DELETED_ID, is deleted; the demo prints that it is gone from the latest state.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

TOPIC = "users-cdc"
LOG = f"{TOPIC}-0"
ROWS = 40
DELETED_ID = 7
FLUSH_SIZE = 50
BASE_TS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
BASE_LSN = 33_554_432


def _event(op: str, row: dict, before: dict | None, lsn: int, offset: int) -> dict:
    """A Debezium PostgreSQL envelope with InsertField's offset and timestamp."""
    ts = BASE_TS + offset * 100
    return {
        "before": before,
        "after": None if op == "d" else row,
        "op": op,
        "ts_ms": ts + 5,
        "source": {
            "version": "3.0.0.Final",
            "connector": "postgresql",
            "name": "app",
            "ts_ms": ts,
            "db": "app",
            "schema": "public",
            "table": "users",
            "txId": 700 + offset,
            "lsn": lsn,
        },
        "kafka_offset": offset,
        "kafka_ts": ts,
    }


def change_events(seed: int = 11) -> list[tuple[int, dict | None]]:
    """The partition's records in offset order: (row id, envelope), None for a tombstone."""
    rng = random.Random(seed)
    rows = {i: {"id": i, "email": f"user{i}@example.com", "plan": "free"} for i in range(1, ROWS + 1)}
    changes: list[tuple[str, int, dict | None, dict]] = [("r", i, None, dict(r)) for i, r in rows.items()]
    for _ in range(3 * ROWS):
        i = rng.choice([i for i in rows if i != DELETED_ID])
        old_row = dict(rows[i])
        rows[i] = {
            **rows[i],
            "plan": rng.choice(["free", "pro", "team"]),
            "email": f"u{i}.{rng.randrange(99)}@example.com",
        }
        changes.append(("u", i, old_row, dict(rows[i])))
    changes.append(("d", DELETED_ID, rows[DELETED_ID], rows[DELETED_ID]))
    lsns = [BASE_LSN + 64 * n for n in range(len(changes))]
    order = list(range(len(changes)))
    for i in (3, 11, 19, 27):  # re-sent changes: these rows' last change lands before the one it follows
        a, b = [n for n, c in enumerate(changes) if c[1] == i][-2:]
        order[a], order[b] = order[b], order[a]
    out: list[tuple[int, dict | None]] = []
    for n in order:
        op, i, before, row = changes[n]
        out.append((i, _event(op, row, before, lsns[n], len(out))))
        if op == "d":
            out.append((i, None))  # tombstones.on.delete
    return out


def _lines(objs: list) -> str:
    return "".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs)


def write_cdc_landing(landing: str | Path) -> list[Path]:
    """The topic's files under `landing` (Confluent's `topics.dir`): value, keys and tombstone files."""
    events = change_events()
    part, tomb = Path(landing) / TOPIC / "partition=0", Path(landing) / TOPIC / "tombstone"
    written = []
    for start in range(0, len(events), FLUSH_SIZE):
        chunk = list(enumerate(events[start : start + FLUSH_SIZE], start))
        values = [(o, i, e) for o, (i, e) in chunk if e is not None]
        dead = [(o, i) for o, (i, e) in chunk if e is None]
        if values:
            name = f"{TOPIC}+0+{values[0][0]:010d}"
            part.mkdir(parents=True, exist_ok=True)
            (part / f"{name}.json").write_text(_lines([e for _, _, e in values]))
            (part / f"{name}.keys.json").write_text(_lines([{"id": i} for _, i, _ in values]))
            written += [part / f"{name}.json", part / f"{name}.keys.json"]
        if dead:
            tomb.mkdir(parents=True, exist_ok=True)
            path = tomb / f"{TOPIC}+0+{dead[0][0]:010d}.keys.json"
            path.write_text(_lines([{"id": i} for _, i in dead]))
            written.append(path)
    return written


def deleted_row_line(store_root: str, topics_file: str) -> str:
    """One line: whether the deleted row is gone from the log's latest state, and how many rows remain."""
    from compaction_assets.state.latest_state import latest_state_table
    from compaction_assets.store.log_store import LogStore
    from compaction_assets.topics.config import load_topics

    handle = LogStore(store_root).log(LOG)
    state = latest_state_table(handle, load_topics(topics_file).config_for(TOPIC))
    got = {
        json.loads(k)["id"]: json.loads(v)
        for k, v in zip(state.column("key").to_pylist(), state.column("value").to_pylist())
    }
    latest: dict[int, tuple[int, dict | None]] = {}
    for i, e in change_events():
        if e is not None and e["source"]["lsn"] > latest.get(i, (-1, None))[0]:
            latest[i] = (e["source"]["lsn"], e["after"])
    stale = sum(1 for i, row in got.items() if row != latest[i][1])
    verdict = "STILL PRESENT in" if DELETED_ID in got else "gone from"
    order = "each at its latest change by source.lsn" if not stale else f"{stale} NOT at their latest change"
    return (
        f"{LOG}: row id={DELETED_ID}, deleted in the source (Debezium op=d, then its tombstone), is {verdict} "
        f"the latest state; {len(got)} of {ROWS} rows remain, {order}"
    )
