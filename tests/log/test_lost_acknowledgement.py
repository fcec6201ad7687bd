"""A write whose reply was lost is still this writer's own: the real S3 server (SeaweedFS) behind a real
loopback proxy (tests/fault_proxy.py) that forwards a conditional PUT, awaits the server's reply and
cuts the client off instead of relaying it. The client retries the PUT, which the server then refuses
(the object exists, or its e-tag moved): the store must read the object back and recognise its own bytes,
never take its own manifest for a competitor's (an append would delete the files its commit names) nor
its own lease for another holder's."""

from __future__ import annotations

import re
import time
from urllib.parse import urlparse

import pytest

from compaction_assets.cleaning import engine
from compaction_assets.errors import StorageError
from compaction_assets.log import writer
from compaction_assets.log.reader import iter_records
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.topics.config import build_config
from tests.fault_helpers import batch
from tests.fault_proxy import FaultProxy
from tests.log.test_store_faults import check_layout

CFG = build_config({"segment.bytes": 2000})
NOW = 10**12


def manifest_put(version: int) -> re.Pattern:
    """The request line of the conditional PUT that commits manifest `version`."""
    return re.compile(rb"PUT \S*/_log/%020d\.json HTTP/1\.1" % version)


@pytest.fixture
def proxied(s3_server, monkeypatch):
    """A fresh bucket reached through a FaultProxy (its endpoint in AWS_ENDPOINT_URL, as a user sets it);
    `direct()` opens the same store straight on the server, to check what the server holds."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3_server.new_bucket()}/store"
    server = urlparse(s3_server.endpoint)
    proxy = FaultProxy((server.hostname, server.port), None).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)

    def direct() -> LogStore:
        proxy.stop()
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
        return LogStore(uri, gc_grace_s=0)

    yield uri, proxy, direct
    proxy.stop()


def objects_exist(handle) -> None:
    """Every file a recent manifest references is on the server (a side table: keys under its prefix)."""
    for name in handle.referenced():
        path = handle.path(name)
        assert handle.st.exists(path) or handle.st.list_dir(path), f"referenced object {name} is missing"


def expected(rows: list[dict]) -> list[tuple[bytes, bytes | None]]:
    return [(r["key"].encode(), r["value"]) for r in rows]


def test_an_append_whose_commit_reply_is_lost_is_committed_once_with_its_files(proxied):
    uri, proxy, direct = proxied
    h = LogStore(uri, gc_grace_s=0).log("lost-0")
    first, second = batch(40, 1), batch(40, 2)
    writer.append(h, CFG, first)
    proxy.drop_reply_to = manifest_put(2)
    result = writer.append(h, CFG, second)
    assert [d.reply_status for d in proxy.dropped] == ["HTTP/1.1 200 OK"], proxy.dropped  # the server committed it
    assert (result.records, result.first_offset, result.last_offset) == (40, 40, 79)
    h = direct().log("lost-0")
    m = h.manifest()
    assert m.version == 2 and m.log_end_offset == 80
    objects_exist(h)
    assert [(r.key, r.value) for r in check_layout(h, m)] == expected(first + second)  # once each, in order


def test_an_append_whose_commit_cannot_be_read_back_fails_and_keeps_its_files(proxied):
    """The reply is lost and the store then fails the read-back too: a machine fault, so the append fails
    with the store's one-line error and deletes nothing (its commit may stand, and here it does); the
    retried ingestion finds its name committed and appends nothing twice."""
    uri, proxy, direct = proxied
    h = LogStore(uri, gc_grace_s=0).log("lost-0")
    rows = batch(30, 5)
    proxy.drop_reply_to = manifest_put(1)
    proxy.refuse_after_drop = re.compile(rb"GET \S*/_log/\d{20}\.json HTTP/1\.1")
    with pytest.raises(StorageError, match="store s3://") as info:
        writer.append(h, CFG, rows, ingest_name="landing/b.jsonl")
    assert "\n" not in str(info.value) and len(proxy.dropped) == 1
    h = direct().log("lost-0")
    objects_exist(h)
    assert h.manifest().ingested == ("landing/b.jsonl",)
    assert writer.append(h, CFG, rows, ingest_name="landing/b.jsonl").already_ingested
    assert [(r.key, r.value) for r in iter_records(h)] == expected(rows)


def test_an_ingest_whose_commit_reply_is_lost_is_not_ingested_twice(proxied):
    uri, proxy, direct = proxied
    h = LogStore(uri, gc_grace_s=0).log("lost-0")
    rows = batch(30, 3)
    proxy.drop_reply_to = manifest_put(1)
    writer.append(h, CFG, rows, ingest_name="landing/a.jsonl")
    again = writer.append(h, CFG, rows, ingest_name="landing/a.jsonl")  # a retried ingestion of the same file
    assert len(proxy.dropped) == 1 and again.already_ingested
    h = direct().log("lost-0")
    objects_exist(h)
    assert [(r.key, r.value) for r in iter_records(h)] == expected(rows)


def test_a_lease_whose_create_reply_is_lost_is_held_by_its_creator(proxied):
    uri, proxy, direct = proxied
    h = LogStore(uri, gc_grace_s=0).log("lost-0")
    proxy.drop_reply_to = re.compile(rb"PUT \S*/_locks/append\.lock HTTP/1\.1")
    rows = batch(10, 4)
    writer.append(h, CFG, rows)
    assert len(proxy.dropped) == 1
    h = direct().log("lost-0")
    assert h.lock_holder("append") is None  # released by its holder
    assert [(r.key, r.value) for r in iter_records(h)] == expected(rows)


def test_a_lease_whose_renewal_reply_is_lost_stays_its_holders(proxied):
    uri, proxy, direct = proxied
    h = LogStore(uri, lock_ttl_s=1.5, gc_grace_s=0).log("lost-0")
    proxy.drop_reply_to = re.compile(
        rb"PUT \S*/_locks/clean\.lock HTTP/1\.1\r\n(?:[^\r\n]+\r\n)*?if-match:", re.IGNORECASE
    )
    with h.lock("clean"):
        for _ in range(200):  # the heartbeat renews every half second
            if proxy.dropped:
                break
            time.sleep(0.05)
        assert proxy.dropped, "no renewal went through the proxy"
        renewed_at = h.lock_holder("clean").expires_ms
        for _ in range(40):  # a beat after the lost reply: the lease is still renewed (or else lost)
            if h.lock_holder("clean").expires_ms > renewed_at:
                break
            time.sleep(0.1)
        committed = h.update(lambda m: m.with_(invalid_records=7))  # fenced by the lease: refused if lost
    assert committed.invalid_records == 7
    assert direct().log("lost-0").lock_holder("clean") is None


def test_a_cleaning_whose_commit_reply_is_lost_reports_its_cleaning(spark, proxied):
    uri, proxy, direct = proxied
    h = LogStore(uri, gc_grace_s=0).log("lost-0")
    rows = [{"key": f"k{i % 5}", "value": f"v{i}", "timestamp": i + 1} for i in range(40)]
    writer.append(h, CFG, rows)
    writer.roll(h)
    engine.prepare(h, CFG, NOW)  # the evaluation's own changes now, so the cleaning's commit is the next version
    cleaned_version = h.latest_version() + 1
    proxy.drop_reply_to = manifest_put(cleaned_version)
    report = engine.run(h, CFG, NOW, spark=spark, force=True)
    assert len(proxy.dropped) == 1 and report.cleaned and report.after_version == cleaned_version
    h = direct().log("lost-0")
    assert h.manifest_version(cleaned_version).last_cleaning is not None
    objects_exist(h)
    assert sorted((r.key, r.value) for r in iter_records(h)) == [
        (f"k{k}".encode(), f"v{35 + k}".encode()) for k in range(5)
    ]


@pytest.fixture(params=["local", "s3"])
def any_store_uri(request, tmp_path):
    """A local folder, then a fresh bucket on the S3 server (no proxy)."""
    if request.param == "local":
        return str(tmp_path / "store")
    return request.getfixturevalue("s3_store_uri")


def test_a_create_finding_its_own_bytes_is_its_own_and_other_bytes_a_conflict(any_store_uri):
    """What a retried create or replace meets, made by a real second writer: the same bytes are this
    write's own (created, with the object's version), different bytes another writer's (lost)."""
    mine, theirs = Storage.open(any_store_uri), Storage.open(any_store_uri)
    mine.makedirs(mine.join("_log"))
    path = mine.join("_log", "00000000000000000001.json")
    assert theirs.create_versioned(path, b'{"writer": "theirs"}') is not None
    assert mine.create_versioned(path, b'{"writer": "mine"}') is None
    assert mine.create_exclusive(path, b'{"writer": "mine"}') is False
    found, seen = theirs.read_versioned(path)
    again = mine.create_versioned(path, found)  # the object already holds exactly these bytes
    assert again is not None and again == seen
    renewed = theirs.replace_if_unchanged(path, b'{"writer": "theirs", "renewed": 1}', seen)
    assert mine.replace_if_unchanged(path, b'{"writer": "mine"}', seen) is None
    assert mine.replace_if_unchanged(path, b'{"writer": "theirs", "renewed": 1}', seen) == renewed
