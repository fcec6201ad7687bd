"""The log store: one folder per log (`<root>/<topic>-<partition>/`).

Layout of a log folder: docs/architecture.md, "The log on disk" (`_log/` manifests, `_locks/` leases,
`data/` segment files, `side/` side tables, `_pins/` versions kept beyond KEEP_VERSIONS).

A change writes its data files first and then commits manifest version N+1 with an exclusive create
(a hard link locally, a conditional PUT on an object store: see `fs`), so it becomes visible all at once
or not at all, and of two writers of N+1 exactly one wins; the loser re-reads and re-applies its change
or fails, and never overwrites the winner.

Leases (`lease`) have an epoch that grows with every holder, and fence commits: a writer commits only while
its lease object still names it, and a manifest records the highest epoch that committed under each kind
of lease, so once a writer that took over a lease has committed, the writer it took over from (stalled
past its expiry) can no longer commit anything (`LeaseLostError`). Files that no manifest references are
leftovers of an interrupted change; `collect_garbage` removes them once they are older than a grace period.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from compaction_assets import settings
from compaction_assets.errors import CompactionError, ConflictError, CorruptLogError, UnknownLogError
from compaction_assets.store.fs import Storage
from compaction_assets.store.lease import Lease, LockHolder, read_holder, wall_ms
from compaction_assets.store.local_files import remove_empty_dirs
from compaction_assets.store.manifest import Attempt, Manifest, side_files
from compaction_assets.store.names import parse_log_name

KEEP_VERSIONS = 5
DEFAULT_GC_GRACE_S = 600.0
CLOCK_SLACK_MS = 60_000  # file times against lease times (another host's clock, coarse mtimes)
# Requests in flight when a pass over many logs reads each one's metadata from an object store: each read
# is a listing and a GET that wait on the network, not the CPU (docs/scaling.md).
OBJECT_STORE_READERS = 16

Item = TypeVar("Item")


class LogStore:
    def __init__(self, root: str, *, lock_ttl_s: float | None = None, gc_grace_s: float = DEFAULT_GC_GRACE_S):
        self.storage = Storage.open(root)
        self.location = root
        # the lease expiry: COMPACTION_LOCK_TTL_SECONDS unless the caller gives one
        self.lock_ttl_s = settings.current().lock_ttl_seconds if lock_ttl_s is None else lock_ttl_s
        self.gc_grace_s = gc_grace_s

    def exists(self) -> bool:
        """Whether the store is there: its folder, or on an object store any key under its prefix."""
        st = self.storage
        return st.is_dir(st.root) if st.local else bool(st.list_dir(st.root))

    def is_a_file(self) -> bool:
        """Whether the store's location is a file, not a folder (a local store: a command refuses it)."""
        st = self.storage
        return st.local and os.path.exists(st.root) and not os.path.isdir(st.root)

    def log(self, name: str, *, must_exist: bool = False) -> LogHandle:
        """The log `name` (refused unless `<topic>-<partition>`: names become paths, so every handle's
        name is checked here, the one place that turns a name into a handle)."""
        topic, partition = parse_log_name(name)
        handle = LogHandle(self, name, topic, partition)
        if must_exist and not handle.exists():
            raise UnknownLogError(f"no log {name!r} in the store at {self.location}")
        return handle

    def logs(self) -> list[str]:
        """Names of the logs in the store (folders with a valid name and at least one manifest)."""
        named = self._named_folders()
        found = self.per_log(named, lambda name: self.log(name).exists())
        return [name for name, exists in zip(named, found) if exists]

    def current_logs(self) -> dict[str, Manifest | CompactionError]:
        """Every log of the store with its current manifest, or the error reading it, by name: what `logs`
        and `read_manifests` give together, with one listing of each log's `_log/` instead of two (a
        sensor's tick over 10,000 logs on an object store, docs/scaling.md)."""
        named = self._named_folders()
        return {
            name: read
            for name, read in zip(named, self.read_manifests(named))
            if isinstance(read, CompactionError) or read.version > 0
        }

    def _named_folders(self) -> list[str]:
        """The store's entries named as logs are (`<topic>-<partition>`), a log or not."""
        named = []
        for entry in self.storage.list_dir(self.storage.root):
            try:
                parse_log_name(entry)
            except Exception:
                continue
            named.append(entry)
        return named

    def read_manifests(self, names: Sequence[str]) -> list[Manifest | CompactionError]:
        """Each named log's current manifest, in order, or the error that reading it raised."""

        def read(name: str) -> Manifest | CompactionError:
            try:
                return self.log(name).manifest()
            except CompactionError as exc:
                return exc

        return self.per_log(names, read)

    def per_log(self, names: Sequence[str], read: Callable[[str], Item]) -> list[Item]:
        """`read` of each name in order; on an object store, OBJECT_STORE_READERS at a time."""
        if self.storage.local or len(names) < 2:
            return [read(name) for name in names]
        with ThreadPoolExecutor(OBJECT_STORE_READERS, thread_name_prefix="log-metadata") as pool:
            return list(pool.map(read, names))


class LogHandle:
    def __init__(self, store: LogStore, name: str, topic: str, partition: int):
        self.store = store
        self.name = name
        self.topic = topic
        self.partition = partition
        self.st = store.storage
        self.dir = self.st.join(name)
        self._held: dict[str, Lease] = {}  # leases this handle holds now, by kind (they fence commits)
        # one handle may serve threads at once (an ingestion and a cleaning of the same log): one takes or
        # drops a lease while another's commit reads them
        self._held_guard = threading.Lock()

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
            stem, _, ext = name.partition(".")
            if ext == "json" and stem.isdigit():
                out.append(int(stem))
        return sorted(out)

    def exists(self) -> bool:
        return bool(self._versions())

    def versions(self) -> list[int]:
        """The manifest versions kept, oldest first (the last KEEP_VERSIONS and the pinned ones)."""
        return self._versions()

    def latest_version(self) -> int:
        """The newest manifest version's number, 0 for none: one LIST on an object store, so a sensor can
        tell an unchanged log for the price of one request."""
        versions = self._versions()
        return versions[-1] if versions else 0

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
            except FileNotFoundError:
                continue  # trimmed by a newer commit between our listing and our read
            except (OSError, ValueError, KeyError, TypeError) as exc:
                errors.append(f"version {v}: {exc}")
        if not errors:
            return self.manifest()
        raise CorruptLogError(f"log {self.name!r}: no readable manifest ({'; '.join(errors[:3])})")

    def manifest_version(self, version: int) -> Manifest:
        """A past version (kept for the last few changes), e.g. the log as it was before a cleaning."""
        try:
            return Manifest.from_json(self.st.read_bytes(self.path(f"_log/{version:020d}.json")))
        except (OSError, ValueError) as exc:
            raise CorruptLogError(f"log {self.name!r}: version {version} is not available ({exc})") from None

    def attempts(self, retries: int = 20) -> Iterator[Attempt]:
        """Tries at committing the next version, each on the newest manifest; the next try comes only after
        `commit` on this one lost to another writer. While this handle holds leases, each try first checks
        that they are still its own (fencing)."""
        self.st.makedirs(self.path("_log"))
        for _ in range(retries):
            current = self.manifest()
            fence = dict(current.fence)
            with self._held_guard:
                held = list(self._held.items())
            for kind, lease in held:
                lease.check(fence.get(kind, 0))
                fence[kind] = max(fence.get(kind, 0), lease.epoch)
            yield Attempt(current, fence)
        raise ConflictError(f"log {self.name!r}: too many concurrent changes, gave up after {retries} tries")

    def commit(self, attempt: Attempt, new: Manifest | None) -> Manifest | None:
        """Commit `new` as the version after `attempt.current` (None: nothing to commit, the current one
        stands); None when another writer committed that version first."""
        if new is None:
            return attempt.current
        new = new.with_(
            version=attempt.current.version + 1,
            log=self.name,
            committed_ms=wall_ms(),
            fence=attempt.fence if attempt.fence else new.fence,
        )
        if not self.st.create_exclusive(self.path(f"_log/{new.version:020d}.json"), new.to_json()):
            return None
        self._trim_versions(new.version)
        return new

    def update(self, change: Callable[[Manifest], Manifest | None], *, retries: int = 20) -> Manifest:
        """Commit `change(current)` as the next version; re-apply it if another writer got there first.
        `change` returns None to commit nothing, or raises ConflictError when it cannot rebase."""
        for attempt in self.attempts(retries):
            committed = self.commit(attempt, change(attempt.current))
            if committed is not None:
                return committed
        raise AssertionError("attempts() raises ConflictError once its tries are spent")

    def _trim_versions(self, latest: int) -> None:
        pinned = self.pinned_versions()
        for v in self._versions():
            if v <= latest - KEEP_VERSIONS and v not in pinned:
                self.st.delete(self.path(f"_log/{v:020d}.json"))

    def drop_versions_before(self, version: int) -> None:
        """Forget every manifest version older than `version`, pinned or not, so that the files only they
        name go at the next garbage collection (after its grace): an erasure (log/forget.py) must not wait
        for KEEP_VERSIONS newer versions. A reader still on a dropped version fails its next read."""
        for name in self.st.list_dir(self.path("_pins")):
            if name.endswith(".json") and not name.startswith("."):
                try:
                    kept = [int(v) for v in json.loads(self.st.read_bytes(self.path(f"_pins/{name}"))) if v >= version]
                except (OSError, ValueError, TypeError):
                    continue
                self.st.write_atomic(self.path(f"_pins/{name}"), json.dumps(kept).encode())
        for v in self._versions():
            if v < version:
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
                    continue  # a pin being replaced: the versions stay until the next trim
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
        lease = Lease(self.st, self.name, self.path("_locks"), kind, ttl_s or self.store.lock_ttl_s, purpose)
        with lease.taking():
            # each try reads the epoch committed last: a holder that released meanwhile may have committed
            if not any(lease.take(self._fence(kind)) for _ in range(3)):
                raise lease.contended()
        with self._held_guard:
            self._held[kind] = lease
        try:
            yield
        finally:
            with self._held_guard:
                self._held.pop(kind, None)
            lease.release()

    def _fence(self, kind: str) -> int:
        """The highest epoch that committed under leases of `kind` (0 for a log whose manifest is corrupt:
        its holder is about to report or repair it, and no committed epoch is known)."""
        try:
            return int(self.manifest().fence.get(kind, 0))
        except CorruptLogError:
            return 0

    def lock_holder(self, kind: str) -> LockHolder | None:
        """Who holds the log's lease of this kind; None when there is none, or it is torn."""
        return read_holder(self.st, self.path(f"_locks/{kind}.lock"))

    # --- leftovers -----------------------------------------------------------------------------
    def referenced(self) -> set[str]:
        names: set[str] = set()
        for m in self.recent_manifests():
            names.update(f.name for f in m.files())
            for side in (m.remembered, m.tombstone_index, m.deleted):
                names.update(side_files(side))
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
        if appending is not None and appending.expires_ms > now:
            in_flight_since = (now if appending.acquired_ms is None else appending.acquired_ms) - CLOCK_SLACK_MS
        keep = {self.path(n) for n in self.referenced()}  # files, and side tables that are folders
        keep_dirs = {os.path.dirname(p) for p in keep}
        removed = []
        for top in ("data", "side", "_log"):
            # One listing gives names and times on an object store (no request per file).
            for path, mtime in self.st.list_files_with_mtime(self.path(top)):
                base = path.rsplit("/", 1)[-1]
                if top == "_log" and not base.startswith(".tmp-"):
                    continue
                if (
                    path in keep
                    or any(path.startswith(k + "/") for k in keep)
                    or (base.startswith("_SUCCESS") and os.path.dirname(path) in keep_dirs)
                ):
                    continue
                if mtime is not None and (
                    now - mtime < grace_ms or (in_flight_since is not None and mtime >= in_flight_since)
                ):
                    continue
                self.st.delete(path)
                removed.append(path)
        if self.st.local:
            remove_empty_dirs(self.path("data"))
            remove_empty_dirs(self.path("side"))
        return removed
