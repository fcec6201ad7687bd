"""A log's leases: the lease file (`<log>/_locks/<kind>.lock`) and who it names (`LockHolder`), and the
`Lease` a writer takes, renews and releases.

A lease has an expiry and an epoch that grows with every holder. It is created only if absent; an expired
one is taken over by a conditional replace of exactly the version that was read (so of two writers that
saw it expired, one wins) with a higher epoch; a heartbeat thread renews it the same way, so a holder whose
lease was taken over learns it at its next beat, and its next commit is refused (`Lease.check`, which the
log handle calls before every commit while it holds the lease).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from compaction_assets.errors import LeaseLostError, LockedError, StorageError, os_error_meaning
from compaction_assets.store.fs import Storage, Version


def wall_ms() -> int:
    """The wall clock in milliseconds (leases expire by it: their holders may be on other hosts)."""
    return int(time.time() * 1000)


@dataclass(frozen=True)
class LockHolder:
    """A lease file's content: its holder, why it holds the lease, since and until when, and its epoch."""

    owner: str | None = None  # "<host>:<pid>:<8 hex>", one per lease taken; None: a foreign lock object
    pid: int | None = None  # the holder's process id
    host: str | None = None  # the holder's host name
    purpose: str | None = None  # what it holds the lease for (in the LockedError a second writer gets)
    acquired_ms: int | None = None  # when it took the lease (renewals keep it); what it wrote since is its own
    epoch: int = 0  # grows with every holder; fences commits of the holders before it
    expires_ms: int = 0  # the lease is free after this (wall clock); 0: expired, taken over at once

    @classmethod
    def from_json(cls, data: bytes) -> LockHolder | None:
        """The holder a lease file names; None for a torn or foreign one (not a JSON object of a lease)."""
        try:
            document = json.loads(data)
            if not isinstance(document, dict):
                return None
            acquired = document.get("acquired_ms")
            # missing keys take their defaults: a lease written by hand or by an older version still reads
            return cls(
                owner=document.get("owner"),
                pid=document.get("pid"),
                host=document.get("host"),
                purpose=document.get("purpose"),
                acquired_ms=None if acquired is None else int(acquired),
                epoch=int(document.get("epoch", 0)),
                expires_ms=int(document.get("expires_ms", 0)),
            )
        except (ValueError, TypeError):
            return None

    def to_json(self) -> bytes:
        """The lease file's bytes: one JSON object, its keys in the fields' order."""
        return json.dumps(asdict(self)).encode()


def read_holder(storage: Storage, path: str) -> LockHolder | None:
    """Who the lease file at `path` names; None when there is none, or it is torn."""
    try:
        return LockHolder.from_json(storage.read_bytes(path))
    except StorageError:
        raise
    except OSError:
        return None


class Lease:
    """A lock object with an expiry and an epoch, renewed by a heartbeat thread while held.

    It knows its log by name and folder only: the log handle takes it (`LogHandle.lock`: `taking`, then
    `take` until it holds), reading between tries the epoch that last committed, so a lease never calls
    back into its log."""

    def __init__(self, storage: Storage, log: str, folder: str, kind: str, ttl_s: float, purpose: str):
        self.st = storage
        self.log = log
        self.folder = folder  # the log's `_locks` folder
        self.kind = kind
        self.ttl_ms = int(ttl_s * 1000)
        self.path = f"{folder}/{kind}.lock"
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.purpose = purpose
        self.epoch = 0
        self.acquired_ms: int | None = None
        self.version: Version | None = None
        self.lost = False
        self._mutex = threading.Lock()  # the heartbeat and `check` share `version`
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return LockHolder(
            owner=self.owner,
            pid=os.getpid(),
            host=socket.gethostname(),
            purpose=self.purpose,
            acquired_ms=self.acquired_ms,
            epoch=self.epoch,
            expires_ms=wall_ms() + self.ttl_ms,
        ).to_json()

    @contextmanager
    def taking(self) -> Iterator[None]:
        """Around the tries that take the lease (`take`): its folder made and the time it is taken at; a
        store that cannot be written named (the lock is the first thing a writing command writes)."""
        try:
            self.st.makedirs(self.folder)
            self.acquired_ms = wall_ms()  # kept by renewals: what was written since is the holder's
            yield
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            raise StorageError(
                f"log {self.log!r} cannot be locked for {self.kind}: the store at {self.st.root} "
                f"cannot be written ({os_error_meaning(exc)})"
            ) from exc

    def take(self, fence: int) -> bool:
        """One try at taking the lease, its epoch above `fence` (the highest that committed under its kind,
        so that it fences them all): created, or an expired one taken over (True); False when it is to be
        tried again (released or moved by another writer meanwhile); LockedError while another holds it."""
        self.epoch = fence + 1
        created = self.st.create_versioned(self.path, self._body())
        if created is None:
            try:
                data, seen = self.st.read_versioned(self.path)
            except FileNotFoundError:  # released between our two calls
                return False
            created = self._take_over(data, seen)
            if created is None:
                return False
        self.version = created
        self._start_heartbeat()
        return True

    def contended(self) -> LockedError:
        """The error of a lease that every try lost to other writers."""
        return LockedError(f"log {self.log!r}: could not take the {self.kind} lock (contended)")

    def _take_over(self, data: bytes, seen: Version) -> Version | None:
        """Take over the lease file read as `data` at version `seen` if it has expired: its new version, or
        None when it is to be tried again (another writer moved it, or it was torn and is now deleted)."""
        holder = LockHolder.from_json(data)
        if holder is None:  # a torn or foreign lock object: expired, and deleted rather than replaced
            self.epoch = max(self.epoch, 1)
            self.st.delete(self.path)
            return None
        if holder.expires_ms > wall_ms():
            left = (holder.expires_ms - wall_ms()) / 1000
            raise LockedError(
                f"log {self.log!r} is locked for {self.kind} (lock {self.path}) by {holder.owner} "
                f"(pid {holder.pid} on {holder.host}, {holder.purpose or 'no purpose given'}); "
                f"the lease expires in {left:.0f}s unless its holder renews it"
            )
        # An expired lease: its holder died or stalled. Take it over only if nobody renewed or took
        # it meanwhile (a replace of exactly the version read), with a higher epoch.
        self.epoch = max(self.epoch, holder.epoch + 1)
        return self.st.replace_if_unchanged(self.path, self._body(), seen)

    def renew(self) -> bool:
        """Extend the lease if it is still ours (a conditional replace); False once it was taken over."""
        with self._mutex:
            if self.lost or self.version is None:
                return False
            new = self.st.replace_if_unchanged(self.path, self._body(), self.version)
            if new is None:
                self.lost = True
                return False
            self.version = new
            return True

    def check(self, committed_epoch: int) -> None:
        """Raise LeaseLostError unless this lease still names us and no later epoch has committed."""
        if not self.lost and committed_epoch <= self.epoch:
            holder = read_holder(self.st, self.path)
            if holder is not None and holder.owner == self.owner:
                return
        self.lost = True
        raise LeaseLostError(
            f"log {self.log!r}: the {self.kind} lease of {self.owner} was taken over by another writer "
            f"(it expired while this one stalled); nothing more of this change is committed"
        )

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(max(self.ttl_ms / 3000, 0.05)):
                try:
                    if not self.renew():
                        return
                except Exception:  # a store hiccup: try again at the next beat, the lease lasts 3 beats
                    continue

        self._thread = threading.Thread(target=beat, name=f"lease-{self.log}-{self.kind}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and delete the lease file if it still names us."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            data, seen = self.st.read_versioned(self.path)
        except FileNotFoundError:
            return
        holder = LockHolder.from_json(data)
        if holder is not None and holder.owner == self.owner:
            self.st.delete_if_unchanged(self.path, seen)
