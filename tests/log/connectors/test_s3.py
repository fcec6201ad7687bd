"""The landing area and the store on the S3 server (SeaweedFS): a Confluent layout with a tombstone/
folder is discovered, interleaved and ingested through the object store, at most once."""

from __future__ import annotations

import json

from compaction_assets.log.config import build_config
from compaction_assets.log.fs import Storage
from compaction_assets.log.landing import ingest, landing_logs, pending_files
from compaction_assets.log.reader import iter_records
from compaction_assets.log.store import LogStore
from tests.log.connectors.sinks import confluent_name


def lines(objs) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objs).encode()


def test_confluent_layout_on_s3(s3_store_uri):
    landing_uri = s3_store_uri.rsplit("/", 1)[0] + "/topics"
    land = Storage.open(landing_uri)
    part = land.join("users", "partition=0")
    land.write_atomic(f"{part}/{confluent_name('users', 0, 0, ext='json')}",
                      lines([{"id": 1, "email": "a", "o": 0}, {"id": 2, "email": "b", "o": 2}]))
    land.write_atomic(f"{part}/{confluent_name('users', 0, 0, '.keys', 'json')}", lines([{"id": 1}, {"id": 2}]))
    land.write_atomic(land.join("users", "tombstone", confluent_name("users", 0, 1, ".keys", "json")), lines([{"id": 1}]))
    found, refused = landing_logs(landing_uri)
    assert list(found) == ["users-0"] and refused == []
    assert str(found["users-0"]).startswith("s3://")
    handle = LogStore(s3_store_uri).log("users-0")
    cfg = build_config({"landing.format": "confluent", "landing.offset.field": "o"})
    report = ingest(handle, cfg, found["users-0"])
    assert report["records_appended"] == 3 and report["timestamps_from_mtime"] == 3
    assert [(r.offset, r.key, r.value) for r in iter_records(handle)] == [
        (0, b'{"id":1}', b'{"email":"a","id":1}'), (1, b'{"id":1}', None), (2, b'{"id":2}', b'{"email":"b","id":2}')]
    assert pending_files(landing_logs(landing_uri)[0]["users-0"], handle.manifest().ingested) == []
    assert ingest(handle, cfg, landing_logs(landing_uri)[0]["users-0"])["records_appended"] == 0
