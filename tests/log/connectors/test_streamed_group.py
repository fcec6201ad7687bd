"""A Confluent Parquet group whose tombstones chain its files is appended piece by piece (a value file at a
time): the log it leaves is the one the group read whole as one table leaves, segment for segment."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compaction_assets.ingest.connectors.ingest import append_batch, batches
from compaction_assets.ingest.connectors.stream import StreamedGroup
from compaction_assets.ingest.formats import canonical
from compaction_assets.ingest.landing import ingest, landing_logs
from compaction_assets.log.reader import iter_records
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from tests.log.connectors.sinks import confluent_name, write_parquet

CFG = {
    "landing.format": "confluent",
    "landing.offset.field": "kafka_offset",
    "landing.timestamp.field": "kafka_ts",
    "segment.bytes": 2500,
    "segment.ms": 120,
}
EXT = "snappy.parquet"


def _time(offset: int) -> int:
    """3 ms apart up to offset 130 (rolls by segment.ms), then 1 ms (rolls by segment.bytes)."""
    return 1_700_000_000_000 + 3 * min(offset, 130) + max(offset - 130, 0)


def _land(root, chunks: list[tuple[int, int]]) -> int:
    """Value files over [start, stop) with every 7th offset left to the tombstone file rotated with them;
    a tombstone alone at offset 0 before the first value file. Returns the number of value files."""
    part, tomb = root / "users" / "partition=0", root / "users" / "tombstone"
    write_parquet(tomb / confluent_name("users", 0, 0, ".keys", EXT), pa.table({"key": pa.array([{"id": 5}])}))
    for n, (start, stop) in enumerate(chunks):
        live = [o for o in range(start, stop) if o % 7]
        dead = [o for o in range(start, stop) if not o % 7]
        write_parquet(
            part / confluent_name("users", 0, start, ext=EXT),
            pa.table(
                {
                    "id": [o % 11 for o in live],
                    "email": [f"u{o}@x" for o in live],
                    "kafka_offset": live,
                    "kafka_ts": [_time(o) for o in live],
                }
            ),
        )
        write_parquet(
            part / confluent_name("users", 0, start, ".keys", EXT),
            pa.table({"key": pa.array([{"id": o % 11} for o in live])}),
        )
        if n % 2:  # headers on some files only
            write_parquet(
                part / confluent_name("users", 0, start, ".headers", EXT),
                pa.table({"headers": pa.array([[{"key": "trace", "value": f"t{o}"}] for o in live])}),
            )
        write_parquet(
            tomb / confluent_name("users", 0, dead[0], ".keys", EXT),
            pa.table({"key": pa.array([{"id": o % 11} for o in dead])}),
        )
    return len(chunks)


def _segments(handle) -> list[tuple]:
    return [
        (
            s.base_offset,
            s.next_offset,
            s.records,
            s.size,
            s.min_ts,
            s.max_ts,
            s.first_ts,
            s.min_pos_ts,
            s.tombstones,
            s.horizons,
            sum(f.records for f in s.files),
        )
        for s in handle.manifest().segments
    ]


def _state(handle) -> tuple:
    m = handle.manifest()
    return (m.log_start_offset, m.log_end_offset, m.checkpoint, m.holds, m.invalid_records, m.ingested)


def test_a_streamed_group_leaves_the_log_a_whole_group_leaves(tmp_path, store):
    root = tmp_path / "landing"
    files = _land(root, [(1, 60), (60, 75), (75, 90), (90, 130), (130, 145), (145, 160), (160, 260)])
    cfg = build_config(CFG)
    src = landing_logs(root)[0]["users-0"]

    whole = store.log("whole-0")
    [one] = list(batches(src, cfg.landing, (), whole=True))
    append_batch(whole, cfg, one, drop_invalid=False)

    [group] = list(batches(src, cfg.landing, ()))
    assert isinstance(group, StreamedGroup) and len(list(group.pieces())) == files
    streamed = store.log("users-0")
    report = ingest(streamed, cfg, src)

    assert report.records_appended == len(one.table) == 260
    assert report.timestamps_from_mtime == one.mtime_timestamps == 1  # the lone first tombstone
    segments = streamed.manifest().segments
    assert len(segments) > 2 and max(len(s.files) for s in segments) > 1  # rolls inside pieces, and segments
    # that span pieces (the active segment carried from one piece to the next)
    assert _segments(streamed) == _segments(whole)
    assert _state(streamed) == _state(whole)
    fields = ("offset", "key", "value", "timestamp", "headers")
    assert [tuple(getattr(r, f) for f in fields) for r in iter_records(streamed)] == [
        tuple(getattr(r, f) for f in fields) for r in iter_records(whole)
    ]
    schemas = [canonical.read_schema(h.st, h.path(canonical.SCHEMA_FILE)) for h in (streamed, whole)]
    assert schemas[0].schema.equals(schemas[1].schema)
    assert ingest(streamed, cfg, src).records_appended == 0  # recorded once, under the group's name


def test_a_bad_record_in_a_later_piece_writes_nothing(tmp_path, store):
    root = tmp_path / "landing"
    _land(root, [(1, 60), (60, 130)])
    part = root / "users" / "partition=0"
    write_parquet(
        part / confluent_name("users", 0, 60, ".keys", EXT),  # a null key in the second value file
        pa.table({"key": pa.array([None if o == 100 else {"id": o % 11} for o in range(60, 130) if o % 7])}),
    )
    handle = store.log("users-0")
    cfg = build_config(CFG)
    try:
        ingest(handle, cfg, landing_logs(root)[0]["users-0"])
    except Exception as exc:
        message = str(exc)
    assert confluent_name("users", 0, 60, ext=EXT) in message and "null key" in message and "\n" not in message
    data = [p for p in (tmp_path / "store" / "users-0").rglob("*.parquet")]
    assert handle.manifest().log_end_offset == 0 and data == []  # the first piece's files deleted too


def test_a_later_value_file_that_is_not_parquet_writes_nothing(tmp_path, store):
    # read while the piece before it is written (read ahead in a thread): its error still names it and the
    # files already written for the group are deleted
    root = tmp_path / "landing"
    _land(root, [(1, 60), (60, 130), (130, 170)])
    broken = root / "users" / "partition=0" / confluent_name("users", 0, 130, ext=EXT)
    whole = broken.read_bytes()
    broken.write_bytes(whole[:-40])  # cut short: the footer is gone
    handle = store.log("users-0")
    cfg = build_config(CFG)
    src = landing_logs(root)[0]["users-0"]
    with pytest.raises(Exception) as info:
        ingest(handle, cfg, src)
    assert str(broken) in str(info.value) and "\n" not in str(info.value)
    assert handle.manifest().log_end_offset == 0
    assert list((tmp_path / "store" / "users-0").rglob("*.parquet")) == []
    broken.write_bytes(whole)  # once the connector's file is whole again...
    assert ingest(handle, cfg, src).records_appended == 170  # ...the group goes in whole (offsets 0-169)


@pytest.mark.ci_real
def test_a_group_on_the_s3_server_is_streamed_to_the_same_log(s3_store_uri, tmp_path, store):
    local = tmp_path / "landing"
    _land(local, [(1, 60), (60, 130), (130, 170)])
    landing = s3_store_uri.rsplit("/", 1)[0] + "/topics"
    land = Storage.open(landing)
    for path in local.rglob("*.parquet"):
        land.write_atomic(land.join(*path.relative_to(local).parts), path.read_bytes())
    cfg = build_config(CFG)
    src = landing_logs(landing)[0]["users-0"]
    assert isinstance(next(batches(src, cfg.landing, ())), StreamedGroup)
    on_s3 = LogStore(s3_store_uri).log("users-0")
    ingest(on_s3, cfg, src)
    whole = store.log("whole-0")
    [one] = list(batches(src, cfg.landing, (), whole=True))  # the same objects (their mtime dates a tombstone)
    append_batch(whole, cfg, one, drop_invalid=False)
    assert _segments(on_s3) == _segments(whole) and _state(on_s3)[:5] == _state(whole)[:5]
    fields = ("offset", "key", "value", "timestamp", "headers")
    assert [tuple(getattr(r, f) for f in fields) for r in iter_records(on_s3)] == [
        tuple(getattr(r, f) for f in fields) for r in iter_records(whole)
    ]
