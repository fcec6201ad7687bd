"""The log store: one folder per log (`<root>/<topic>-<partition>/`).

Layout of a log folder:
    _log/<version>.json   immutable manifests; the highest readable version is the log
    _locks/<kind>.lock    leases (cleaning, append) that expire when their holder dies
    data/...              Parquet segment files, referenced by manifests
    side/...              side tables (remembered deletes, tombstone index)
    _pins/<purpose>.json  manifest versions kept beyond KEEP_VERSIONS (with their files) until replaced

A change writes its data files first and then commits manifest version N+1 with an exclusive create, so
it becomes visible all at once or not at all. Files that no manifest references are leftovers of an
interrupted change; `collect_garbage` removes them once they are older than a grace period.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from typing import Callable, Iterator

from compaction_assets import settings
from compaction_assets.errors import ConflictError, CorruptLogError, LockedError, UnknownLogError
from compaction_assets.log.fs import Storage
from compaction_assets.log.manifest import Manifest
from compaction_assets.log.names import parse_log_name

KEEP_VERSIONS = 5
DEFAULT_LOCK_TTL_S = settings.DEFAULT_LOCK_TTL_SECONDS
DEFAULT_GC_GRACE_S = 600.0
CLOCK_SLACK_MS = 60_000   # file times against lease times (another host's clock, coarse mtimes)


def lock_ttl_from_env() -> float:
    """The lease expiry: COMPACTION_LOCK_TTL_SECONDS (a positive number of seconds), else 300 s."""
    return settings.current().lock_ttl_seconds


def wall_ms() -> int:
    """The wall clock in milliseconds."""
    return int(time.time() * 1000)


class LogStore:
    def __init__(self, root: str, *, lock_ttl_s: float | None = None,
                 gc_grace_s: float = DEFAULT_GC_GRACE_S):
        self.storage = Storage.open(root)
        self.location = root
        self.lock_ttl_s = lock_ttl_from_env() if lock_ttl_s is None else lock_ttl_s
        self.gc_grace_s = gc_grace_s

    def log(self, name: str, *, must_exist: bool = False) -> "LogHandle":
        parse_log_name(name)
        handle = LogHandle(self, name)
        if must_exist and not handle.exists():
            raise UnknownLogError(f"no log {name!r} in the store at {self.location}")
        return handle

    def logs(self) -> list[str]:
        """Names of the logs in the store (folders with a valid name and at least one manifest)."""
        out = []
        for entry in self.storage.list_dir(self.storage.root):
            try:
                parse_log_name(entry)
            except Exception:
                continue
            if self.log(entry).exists():
                out.append(entry)
        return out


class LogHandle:
    def __init__(self, store: LogStore, name: str):
        self.store = store
        self.name = name
        self.st = store.storage
        self.dir = self.st.join(name)

    # --- paths ---------------------------------------------------------------------------------
    def path(self, relative: str) -> str:
        return self.st.join(self.name, relative)

    def spark_uri(self, relative: str) -> str:
        return self.st.spark_uri(self.path(relative))

    def new_data_name(self, suffix: str = ".parquet") -> str:
        return f"data/{uuid.uuid4().hex}{suffix}"

    # --- manifests -----------------------------------------------------------------------------
    def _versions(self) -> list[int]:
        out = []
        for name in self.st.list_dir(self.path("_log")):
            stem, dot, ext = name.partition(".")
            if ext == "json" and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def exists(self) -> bool:
        return bool(self._versions())

    def manifest(self) -> Manifest:
        """The current state: the highest manifest version that reads back whole."""
        versions = self._versions()
        if not versions:
            return Manifest.empty(self.name)
        errors = []
        for v in reversed(versions):
            try:
                m = Manifest.from_json(self.st.read_bytes(self.path(f"_log/{v:020d}.json")))
                if m.version != v or m.log != self.name:
                    raise ValueError(f"manifest {v} names version {m.version} of log {m.log!r}")
                return m
            except (OSError, ValueError, KeyError, TypeError) as exc:
                errors.append(f"version {v}: {exc}")
        raise CorruptLogError(f"log {self.name!r}: no readable manifest ({'; '.join(errors[:3])})")

    def manifest_version(self, version: int) -> Manifest:
        """A past version (kept for the last few changes), e.g. the log as it was before a cleaning."""
        try:
            return Manifest.from_json(self.st.read_bytes(self.path(f"_log/{version:020d}.json")))
        except (OSError, ValueError) as exc:
            raise CorruptLogError(f"log {self.name!r}: version {version} is not available ({exc})") from None

    def update(self, change: Callable[[Manifest], Manifest | None], *, retries: int = 20) -> Manifest:
        """Commit `change(current)` as the next version; re-apply it if another writer got there first.

        `change` returns None to commit nothing, or raises ConflictError when it cannot rebase.
        """
        self.st.makedirs(self.path("_log"))
        for _ in range(retries):
            current = self.manifest()
            new = change(current)
            if new is None:
                return current
            new = new.with_(version=current.version + 1, log=self.name, committed_ms=wall_ms())
            if self.st.create_exclusive(self.path(f"_log/{new.version:020d}.json"), new.to_json()):
                self._trim_versions(new.version)
                return new
        raise ConflictError(f"log {self.name!r}: too many concurrent changes, gave up after {retries} tries")

    def _trim_versions(self, latest: int) -> None:
        pinned = self.pinned_versions()
        for v in self._versions():
            if v <= latest - KEEP_VERSIONS and v not in pinned:
                self.st.delete(self.path(f"_log/{v:020d}.json"))

    def pin_versions(self, purpose: str, versions: tuple[int, ...]) -> None:
        """Keep these manifest versions, and so their files, until `purpose` pins others (the asset
        checks re-verify the last cleaning from the versions it read and wrote)."""
        self.st.makedirs(self.path("_pins"))
        self.st.write_atomic(self.path(f"_pins/{purpose}.json"), json.dumps(sorted(set(versions))).encode())

    def pinned_versions(self) -> set[int]:
        """Manifest versions that some pin keeps (never trimmed; their files are never collected)."""
        out: set[int] = set()
        for name in self.st.list_dir(self.path("_pins")):
            if name.endswith(".json") and not name.startswith("."):
                try:
                    out.update(int(v) for v in json.loads(self.st.read_bytes(self.path(f"_pins/{name}"))))
                except (OSError, ValueError, TypeError):
                    continue   # a pin being replaced: the versions stay until the next trim
        return out

    def recent_manifests(self) -> list[Manifest]:
        out = []
        for v in self._versions():
            try:
                out.append(Manifest.from_json(self.st.read_bytes(self.path(f"_log/{v:020d}.json"))))
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    # --- leases --------------------------------------------------------------------------------
    @contextmanager
    def lock(self, kind: str, *, ttl_s: float | None = None, purpose: str = "") -> Iterator[None]:
        lease = Lease(self, kind, ttl_s or self.store.lock_ttl_s, purpose)
        lease.acquire()
        try:
            yield
        finally:
            lease.release()

    def lock_holder(self, kind: str) -> dict | None:
        try:
            return json.loads(self.st.read_bytes(self.path(f"_locks/{kind}.lock")))
        except (OSError, ValueError):
            return None

    # --- leftovers -----------------------------------------------------------------------------
    def referenced(self) -> set[str]:
        names: set[str] = set()
        for m in self.recent_manifests():
            names.update(f.name for f in m.files())
            for side in (m.remembered, m.tombstone_index, m.deleted):
                if side:
                    names.add(side["file"])
        return names

    def collect_garbage(self, grace_s: float | None = None) -> list[str]:
        """Delete files under data/ and side/ that no recent manifest references (interrupted changes)."""
        grace_ms = int((self.store.gc_grace_s if grace_s is None else grace_s) * 1000)
        now = wall_ms()
        # An append in flight (its lease is live) has written files it has not committed yet: keep
        # everything written since it took the lease, however long it takes (a Spark append can take
        # longer than the grace period).
        appending = self.lock_holder("append")
        in_flight_since = None
        if appending is not None and appending.get("expires_ms", 0) > now:
            in_flight_since = int(appending.get("acquired_ms", now)) - CLOCK_SLACK_MS
        keep = {self.path(n) for n in self.referenced()}  # files, and side tables that are folders
        keep_dirs = {os.path.dirname(p) for p in keep}
        removed = []
        for top in ("data", "side", "_log"):
            for path in self.st.list_files_recursive(self.path(top)):
                base = path.rsplit("/", 1)[-1]
                if top == "_log" and not base.startswith(".tmp-"):
                    continue
                if path in keep or any(path.startswith(k + "/") for k in keep) or \
                        (base.startswith("_SUCCESS") and os.path.dirname(path) in keep_dirs):
                    continue
                mtime = self.st.mtime_ms(path)
                if mtime is not None and (now - mtime < grace_ms or
                                          (in_flight_since is not None and mtime >= in_flight_since)):
                    continue
                self.st.delete(path)
                removed.append(path)
        if self.st.local:
            _remove_empty_dirs(self.path("data"))
            _remove_empty_dirs(self.path("side"))
        return removed


def _remove_empty_dirs(top: str) -> None:
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        if dirpath != top and not os.listdir(dirpath):
            try:
                os.rmdir(dirpath)
            except OSError:
                pass


class Lease:
    """A lock file with an expiry, renewed by a heartbeat thread while held."""

    def __init__(self, handle: LogHandle, kind: str, ttl_s: float, purpose: str):
        self.h = handle
        self.kind = kind
        self.ttl_ms = int(ttl_s * 1000)
        self.path = handle.path(f"_locks/{kind}.lock")
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.purpose = purpose
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        now = wall_ms()
        return json.dumps({"owner": self.owner, "pid": os.getpid(), "host": socket.gethostname(),
                           "purpose": self.purpose, "acquired_ms": self.acquired_ms,
                           "expires_ms": now + self.ttl_ms}).encode()

    def acquire(self) -> None:
        st = self.h.st
        st.makedirs(self.h.path("_locks"))
        self.acquired_ms = wall_ms()     # kept by renewals: what was written since is the holder's
        for _ in range(3):
            if st.create_exclusive(self.path, self._body()):
                self._start_heartbeat()
                return
            holder = self.h.lock_holder(self.kind)
            if holder is None:  # released between our two calls
                continue
            if holder.get("expires_ms", 0) > wall_ms():
                left = (holder["expires_ms"] - wall_ms()) / 1000
                raise LockedError(
                    f"log {self.h.name!r} is locked for {self.kind} (lock {self.path}) by {holder.get('owner')} "
                    f"(pid {holder.get('pid')} on {holder.get('host')}, {holder.get('purpose') or 'no purpose given'}); "
                    f"the lease expires in {left:.0f}s unless its holder renews it")
            # An expired lease: its holder died. Take it over only if nobody renewed it meanwhile.
            if self.h.lock_holder(self.kind) == holder:
                st.delete(self.path)
        raise LockedError(f"log {self.h.name!r}: could not take the {self.kind} lock (contended)")

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(max(self.ttl_ms / 3000, 0.05)):
                holder = self.h.lock_holder(self.kind)
                if holder is None or holder.get("owner") != self.owner:
                    return
                self.h.st.write_atomic(self.path, self._body())
        self._thread = threading.Thread(target=beat, name=f"lease-{self.h.name}-{self.kind}", daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        holder = self.h.lock_holder(self.kind)
        if holder is not None and holder.get("owner") == self.owner:
            self.h.st.delete(self.path)
