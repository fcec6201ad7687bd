"""Confluent's tombstone files chain a partition's value files into one offset group; the group is appended
one value file at a time (with the tombstones in its range), and a run that stops between two of those
appends is finished by the next run exactly once, with the offsets an uninterrupted run gives."""

from __future__ import annotations

import pytest

from compaction_assets.errors import InvalidInputError
from compaction_assets.log.config import build_config
from compaction_assets.log.landing import ingest, landing_logs
from compaction_assets.log.reader import iter_records
from compaction_assets.log.store import LogStore
from tests.log.connectors.sinks import confluent_name, write_avro
from tests.log.connectors.test_confluent import AVRO_CFG, KEY_AVRO, VALUE_AVRO, avro_users, tombstones

TS0 = 1_700_000_000_000


def land(root, bad_at: int | None = None) -> None:
    """Three value files (0: offsets 0,1,3; 4: 4,6; 7: 7,8) and two tombstone files: 2 (its records at the
    offsets the values leave free before 9: 2 and 5, so it spans the first two value files) and 9.
    With `bad_at`, the record at that offset has a timestamp before 1970 (the append refuses it)."""
    avro_users(root, 0, [(1, "a", 0), (2, "b", 1), (1, "a2", 3)])
    avro_users(root, 4, [(3, "c", 4), (1, "a3", 6)])
    avro_users(root, 7, [(4, "d", 7), (3, "c2", 8)])
    tombstones(root, 2, [2, 4])
    tombstones(root, 9, [1])
    if bad_at is not None:
        rows = [(3, "c", 4), (1, "a3", 6)]
        part = root / "users" / "partition=0"
        write_avro(part / confluent_name("users", 0, 4), VALUE_AVRO,
                   [{"id": i, "email": e, "kafka_offset": o, "kafka_ts": -TS0 if o == bad_at else TS0 + o}
                    for i, e, o in rows])


def records(handle) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in iter_records(handle)]


def uninterrupted(tmp_path) -> tuple[list[tuple], dict]:
    root = tmp_path / "clean-landing"
    land(root)
    handle = LogStore(str(tmp_path / "clean-store"), gc_grace_s=0).log("users-0")
    report = ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    return records(handle), report


def test_the_group_is_appended_one_value_file_at_a_time(tmp_path):
    got, report = uninterrupted(tmp_path)
    assert [r[0] for r in got] == list(range(10))
    assert [r[2] is None for r in got] == [o in (2, 5, 9) for o in range(10)]
    handle = LogStore(str(tmp_path / "clean-store"), gc_grace_s=0).log("users-0")
    entries = handle.manifest().ingested
    assert len(entries) == 3                              # one append per value file, not one for the chain
    assert entries[0].endswith(f"|tombstone/{confluent_name('users', 0, 2, '.keys')}#0")   # part of file 2
    assert report["files_ingested"] == 11 and report["records_appended"] == 10


def test_a_run_stopped_between_two_appends_is_finished_exactly_once(tmp_path, store):
    root = tmp_path / "landing"
    land(root, bad_at=6)
    handle = store.log("users-0")
    with pytest.raises(InvalidInputError, match="negative timestamp"):
        ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    # the first value file's append went through with the tombstone file's record at offset 2, not its
    # record at 5 (that one falls in the refused value file's range)
    assert handle.manifest().log_end_offset == 4 and len(handle.manifest().ingested) == 1
    assert [r[0] for r in records(handle)] == [0, 1, 2, 3]
    land(root)                                     # the connector writes the file again, right this time
    report = ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    want, _ = uninterrupted(tmp_path)
    assert records(handle) == want                 # same records, offsets and times; nothing twice
    assert report["records_appended"] == 6 and report["files_ingested"] == 8
    assert ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])["records_appended"] == 0


def test_a_manifest_that_recorded_the_whole_group_as_one_name_appends_nothing_again(tmp_path):
    want, _ = uninterrupted(tmp_path)
    handle = LogStore(str(tmp_path / "clean-store"), gc_grace_s=0).log("users-0")
    files = [n.split("#")[0] for entry in handle.manifest().ingested for n in entry.split("|")]
    whole = "|".join(dict.fromkeys(files))          # as the ingestion recorded a group before it was split
    handle.update(lambda m: m.with_(ingested=(whole,)))
    report = ingest(handle, build_config(AVRO_CFG), landing_logs(tmp_path / "clean-landing")[0]["users-0"])
    assert report["records_appended"] == 0 and records(handle) == want


def test_a_late_tombstone_file_below_the_log_end_is_still_refused(tmp_path, store):
    root = tmp_path / "landing"
    avro_users(root, 0, [(1, "a", 0), (2, "b", 1)])
    avro_users(root, 3, [(3, "c", 3)])
    handle = store.log("users-0")
    ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    write_avro(root / "users" / "tombstone" / confluent_name("users", 0, 2, ".keys"), KEY_AVRO, [{"id": 2}])
    with pytest.raises(InvalidInputError, match="below the log end offset"):
        ingest(handle, build_config(AVRO_CFG), landing_logs(root)[0]["users-0"])
    assert handle.manifest().log_end_offset == 4
