"""The lease file's JSON, read as a LockHolder: the format a lease writes stays one object of seven keys in
this order, a hand-written or older lease without some keys still reads, a torn or foreign one reads as none."""

from __future__ import annotations

import json
import os
import socket

from compaction_assets.store.lease import LockHolder

LEASE_KEYS = ["owner", "pid", "host", "purpose", "acquired_ms", "epoch", "expires_ms"]


def test_a_held_lease_reads_as_its_holder_and_writes_back_the_same_bytes(store):
    log = store.log("lease-0")
    with log.lock("clean", purpose="a test holding it"):
        raw = open(log.path("_locks/clean.lock"), "rb").read()
        document = json.loads(raw)
        holder = LockHolder.from_json(raw)
        assert list(document) == LEASE_KEYS
        assert holder == LockHolder(**document) and holder.to_json() == raw
        assert (holder.pid, holder.host, holder.purpose, holder.epoch) == (
            os.getpid(),
            socket.gethostname(),
            "a test holding it",
            1,
        )
        assert holder.owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
        assert holder.acquired_ms <= holder.expires_ms
    assert log.lock_holder("clean") is None


def test_a_lease_without_some_keys_reads_with_their_defaults():
    holder = LockHolder.from_json(b'{"owner": "ghost:1:ab", "expires_ms": 5}')
    assert holder == LockHolder(owner="ghost:1:ab", expires_ms=5)
    assert (holder.pid, holder.acquired_ms, holder.epoch) == (None, None, 0)


def test_a_torn_or_foreign_lease_reads_as_none_and_is_taken_over(store):
    for torn in (b'{"owner": "gho', b"[1, 2]", b'{"epoch": "many"}', "\u00e9t\u00e9".encode("latin-1")):
        assert LockHolder.from_json(torn) is None, torn
    log = store.log("lease-0")
    os.makedirs(log.path("_locks"))
    with open(log.path("_locks/append.lock"), "wb") as fh:
        fh.write(b'{"owner": "gho')
    assert log.lock_holder("append") is None
    with log.lock("append"):
        assert log.lock_holder("append").pid == os.getpid()
