"""`forget` (log/forget.py): a key's winner becomes a tombstone at its own offset, its other records leave,
no offset is taken (a connector's next file still lands), the other keys' records stay byte for byte, the
winner is the strategy's, and a cleaning that read the log before the forget fails its commit."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compaction_assets.cleaning.cleaner import clean
from compaction_assets.cleaning.commits import commit_cleaning, prepare
from compaction_assets.errors import ConflictError, InvalidInputError
from compaction_assets.log import writer
from compaction_assets.log.forget import forget
from compaction_assets.log.reader import iter_records, read_segment
from compaction_assets.planning.planner import cleaning_range
from compaction_assets.segments.segment_stats import chunk_stats
from compaction_assets.topics.config import build_config
from tests.tunings import mark_only

CFG = build_config({})


def connector_file(first: int, rows: list[tuple[str, str | None]], ts: int = 1_000) -> list[dict]:
    """Records as a connector lands them: explicit (Kafka) offsets from `first`."""
    return [
        {"offset": first + i, "key": k, "value": v, "timestamp": ts + i, "headers": [["h", f"{i}"]]}
        for i, (k, v) in enumerate(rows)
    ]


def by_offset(handle) -> dict[int, tuple]:
    return {r.offset: (r.key, r.value, r.timestamp, r.headers) for r in iter_records(handle)}


def test_forget_takes_no_offset_and_the_connector_next_file_lands(store):
    h = store.log("users-0")
    writer.append(
        h, CFG, connector_file(100, [("gdpr", "secret-1"), ("other", "o1"), ("gdpr", "secret-2"), ("x", "x")])
    )
    writer.roll(h)
    writer.append(h, CFG, connector_file(104, [("gdpr", "secret-3"), ("other", "o2")]))
    before = by_offset(h)
    m0 = h.manifest()

    done = forget(h, CFG, [b"gdpr", b"absent"])

    assert done.changed and done.of(b"gdpr").tombstone_offset == 104
    assert done.of(b"gdpr").removed_offsets == (100, 102) and not done.of(b"gdpr").was_tombstone
    assert done.of(b"absent").tombstone_offset is None and not done.of(b"absent").changed
    after = by_offset(h)
    assert after[104] == (b"gdpr", None, before[104][2], before[104][3])  # same timestamp and headers
    assert {o: r for o, r in after.items() if r[0] != b"gdpr"} == {o: r for o, r in before.items() if r[0] != b"gdpr"}
    assert not any(r[1] and r[1].startswith(b"secret") for r in after.values())
    m = h.manifest()
    assert (m.log_end_offset, m.log_start_offset) == (m0.log_end_offset, m0.log_start_offset) == (106, 100)
    assert m.removals == m0.removals + 1 and m.version == m0.version + 1
    # the segments' figures are those of their records
    for seg in m.segments:
        stats = chunk_stats(read_segment(h, seg, m.log_start_offset))
        assert (seg.records, seg.size, seg.min_ts, seg.max_ts, seg.tombstones) == (
            stats["records"],
            stats["size"],
            stats["min_ts"],
            stats["max_ts"],
            stats["tombstones"],
        )
    # the old files stay until the garbage collection, the current ones hold no secret
    for ref in m.files():
        values = h.st.read_parquet(h.path(ref.name), columns=["value"]).column("value").to_pylist()
        assert not any(v and v.startswith(b"secret") for v in values)

    landed = writer.append(h, CFG, connector_file(106, [("gdpr", "back"), ("y", "y")]))
    assert (landed.first_offset, landed.last_offset) == (106, 107)
    assert by_offset(h)[106][:2] == (b"gdpr", b"back")  # a later record re-creates the key, as in Kafka


def test_a_second_forget_changes_nothing(store):
    h = store.log("users-0")
    writer.append(h, CFG, connector_file(0, [("gdpr", "secret"), ("a", "a")]))
    forget(h, CFG, [b"gdpr"])
    version = h.manifest().version
    again = forget(h, CFG, [b"gdpr"])
    assert not again.changed and again.of(b"gdpr").was_tombstone and h.manifest().version == version
    with pytest.raises(InvalidInputError):
        forget(h, CFG, [])


@pytest.mark.parametrize(
    ("config", "rows", "winner"),
    [
        (CFG, [(5, 1), (9, 2), (1, 3)], 2),  # offset: the highest offset
        (build_config({"compaction.strategy": "timestamp"}), [(5, 1), (9, 2), (1, 3)], 1),  # the latest timestamp
        (
            build_config({"compaction.strategy": "header", "compaction.strategy.header": "v"}),
            [(1, 7), (2, 9), (3, 8)],
            1,
        ),
    ],
    ids=["offset", "timestamp", "header"],
)
def test_the_winner_is_the_strategy_s(store, config, rows, winner):
    h = store.log("users-0")
    records = [
        {"key": "gdpr", "value": f"secret{i}", "timestamp": ts, "headers": [["v", version]]}
        for i, (ts, version) in enumerate(rows)
    ]
    writer.append(h, config, [*records, {"key": "a", "value": "a", "timestamp": 1}])
    done = forget(h, config, [b"gdpr"])
    assert done.of(b"gdpr").tombstone_offset == winner
    kept = [r for r in iter_records(h) if r.key == b"gdpr"]
    assert [(r.offset, r.value, r.headers) for r in kept] == [
        (winner, None, [("v", rows[winner][1].to_bytes(8, "big", signed=True))])
    ]


def test_a_cleaning_that_read_the_log_before_the_forget_fails_its_commit(store, spark):
    h = store.log("users-0")
    writer.append(
        h, CFG, [{"key": k, "value": f"{k}{i}", "timestamp": 1} for i in range(3) for k in ("gdpr", "a", "b")]
    )
    writer.roll(h)
    m, ev = prepare(h, CFG, now=10)
    out = clean(spark, h, m, CFG, cleaning_range(m, ev.first_uncleanable_offset), now=10)  # read, not committed

    forget(h, CFG, [b"gdpr"])

    with pytest.raises(ConflictError):
        commit_cleaning(h, m, out, ev.first_uncleanable_offset, ev.reason_for(True), ev)
    records = list(iter_records(h))
    assert [(r.offset, r.value) for r in records if r.key == b"gdpr"] == [(6, None)]  # nothing of the forget lost
    assert len(records) == 7  # and nothing of the log: the cleaning did not commit
    m2, ev2 = prepare(h, CFG, now=20)  # the cleaning run again, on the forget's log
    out2 = clean(spark, h, m2, CFG, cleaning_range(m2, ev2.first_uncleanable_offset), now=20)
    commit_cleaning(h, m2, out2, ev2.first_uncleanable_offset, ev2.reason_for(True), ev2)
    assert {(r.key, r.value) for r in iter_records(h)} == {(b"a", b"a2"), (b"b", b"b2"), (b"gdpr", None)}


def test_rows_no_reader_sees_leave_with_the_file(store, spark):
    """A cleaning that marks the key's old record in the deletion vector leaves its bytes in the file: a
    forget drops them when it rewrites that file."""
    h = store.log("users-0")
    rows = [{"key": f"k{i}", "value": f"v{i}", "timestamp": 1} for i in range(40)]
    writer.append(h, CFG, [{"key": "gdpr", "value": "old-secret", "timestamp": 1}, *rows])
    writer.roll(h)
    writer.append(h, CFG, [{"key": "gdpr", "value": "new-secret", "timestamp": 2}])
    writer.roll(h)
    m, ev = prepare(h, CFG, now=10)
    # marking only (tests/tunings.py): the old record stays in the file, listed in the deletion vector
    out = clean(spark, h, m, CFG, cleaning_range(m, ev.first_uncleanable_offset), now=10, tuning=mark_only())
    commit_cleaning(h, m, out, ev.first_uncleanable_offset, ev.reason_for(True), ev)
    m = h.manifest()
    assert m.deleted, "the cleaning rewrote the segment instead of marking it"
    done = forget(h, CFG, [b"gdpr"])
    assert done.of(b"gdpr").hidden_rows_removed == 1 and done.of(b"gdpr").tombstone_offset == 41
    for ref in h.manifest().files():
        table = h.st.read_parquet(h.path(ref.name), columns=["value"])
        assert not {b"old-secret", b"new-secret"} & set(table.column("value").to_pylist())
    assert pa.concat_tables([read_segment(h, s, 0) for s in h.manifest().segments]).num_rows == 41
    assert sum(s.dead for s in h.manifest().segments) == 0
