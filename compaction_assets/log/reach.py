"""Where a key's values are still reachable in a log, and until when (the log's half of `reachable`).

A value is reachable in the log while its current files hold it: as a visible record (the key's winner, or
a record a cleaning has not removed yet), or as a row no reader sees that is still in a file (below the log
start, or listed by the deletion vector: its segment keeps the file until a cleaning rewrites it). After
that, older files hold it while a kept manifest version names them (the last KEEP_VERSIONS versions and the
pinned ones, which readers in flight and the asset checks read), and a file no version names stays on
disk until the store's garbage collection (after its grace, which every cleaning run starts with).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.log.forget import key_rows, winner_rows
from compaction_assets.log.reader import dead_offsets
from compaction_assets.segments.arrays import to_numpy, visible_mask
from compaction_assets.segments.records import INT64_MAX
from compaction_assets.store.log_store import KEEP_VERSIONS, LogHandle
from compaction_assets.topics.config import TopicConfig

PROBE_COLUMNS = ["key", "is_tombstone"]


@dataclass(frozen=True)
class Bound:
    """When a place stops holding a value: `at_ms` (None: no time bounds it; `why` says what it waits for)."""

    at_ms: int | None
    why: str

    def as_document(self) -> dict[str, object]:
        return {"at_ms": self.at_ms, "why": self.why}


def latest(bounds: Sequence[Bound]) -> Bound | None:
    """The bound of several places: the latest, or one without a time if any has none (None: no place)."""
    if not bounds:
        return None
    unbounded = [b for b in bounds if b.at_ms is None]
    return unbounded[0] if unbounded else max(bounds, key=lambda b: b.at_ms or 0)


@dataclass(frozen=True)
class OldFile:
    """A file the current manifest no longer names that still holds a value of the key."""

    name: str  # relative to the log
    versions: tuple[int, ...]  # the kept manifest versions naming it (empty: none, the GC removes it)
    collectable_after_ms: int | None  # named by no version: when the GC's grace has passed (wall clock)

    def as_document(self) -> dict[str, object]:
        return {"file": self.name, "versions": list(self.versions), "collectable_after_ms": self.collectable_after_ms}


@dataclass(frozen=True)
class LogKeyReach:
    """Where one key's values are in one log, and the bound of each place."""

    log: str
    key: bytes
    value_offsets: tuple[int, ...]  # visible records holding a value
    tombstone_offset: int | None  # the key's winner when it is a tombstone
    tombstone_horizon: int | None  # its delete horizon (None: not stamped yet, the next cleaning does)
    hidden_value_rows: int  # rows of current files no reader sees that hold a value
    old_files: tuple[OldFile, ...]
    bounds: tuple[Bound, ...]  # one per place still holding a value (empty: none)

    def as_document(self) -> dict[str, object]:
        return {
            "value_offsets": list(self.value_offsets),
            "tombstone_offset": self.tombstone_offset,
            "tombstone_horizon": self.tombstone_horizon,
            "hidden_value_rows": self.hidden_value_rows,
            "old_files": [f.as_document() for f in self.old_files],
            "bounds": [b.as_document() for b in self.bounds],
        }


def log_reach(handle: LogHandle, config: TopicConfig, keys: Sequence[bytes]) -> list[LogKeyReach]:
    """Per key, where the log still holds a value of it (current files, older files) and until when."""
    manifest = handle.manifest()
    dead = dead_offsets(handle, manifest)
    wanted = list(dict.fromkeys(keys))
    holding = key_rows(handle, manifest, wanted)
    tables = [t.filter(pc.is_in(t.column("key"), value_set=pa.array(wanted, pa.binary()))) for _, _, t in holding]
    rows = pa.concat_tables(tables) if tables else None
    old = _old_files(handle, {f.name for f in manifest.files()}, wanted)
    return [_key_reach(handle.name, config, key, rows, manifest.log_start_offset, dead, old) for key in wanted]


def _key_reach(log, config, key, rows, log_start, dead, old) -> LogKeyReach:
    """One key's reach from its rows in the current files and the old files holding it."""
    if rows is None or not len(rows):
        mine = None
    else:
        mine = rows.filter(pc.equal(rows.column("key"), pa.scalar(key, pa.binary())))
    offsets = to_numpy(mine.column("offset")) if mine is not None else np.zeros(0, np.int64)
    shown = visible_mask(offsets, log_start, to_numpy(dead) if dead is not None else None)
    tomb = np.asarray(mine.column("is_tombstone").to_pylist(), dtype=bool) if mine is not None else shown
    values = tuple(sorted(int(o) for o in offsets[shown & ~tomb]))
    hidden = int((~shown & ~tomb).sum())
    winner = _winner(config, mine.filter(pa.array(shown))) if mine is not None and shown.any() else None
    tombstone = winner if winner is not None and winner["is_tombstone"] else None
    files = tuple(old.get(key, ()))
    bounds = []
    if values:
        bounds.append(_values_bound(config, mine, winner, tombstone is not None))
    if hidden:
        bounds.append(
            Bound(
                None,
                "rows no reader sees stay in their file until a cleaning rewrites its segment; "
                "`compaction forget` rewrites it now",
            )
        )
    named = [f for f in files if f.versions]
    if named:
        versions = sorted({v for f in named for v in f.versions})
        bounds.append(
            Bound(
                None,
                f"{len(named)} older file(s) named by kept manifest version(s) {versions}: they go "
                f"once {KEEP_VERSIONS} newer versions of the log are committed (and no pin keeps them), "
                "then with the store's garbage collection",
            )
        )
    loose = [f.collectable_after_ms for f in files if not f.versions and f.collectable_after_ms is not None]
    if loose:
        bounds.append(
            Bound(
                max(loose),
                "older file(s) no version names: the store's garbage collection after its "
                "grace (every cleaning run starts with it; `compaction gc`)",
            )
        )
    return LogKeyReach(
        log,
        key,
        values,
        None if tombstone is None else tombstone["offset"],
        None if tombstone is None else tombstone["delete_horizon"],
        hidden,
        files,
        tuple(bounds),
    )


def _winner(config: TopicConfig, visible: pa.Table) -> dict:
    """The key's winner among its visible rows (offset, timestamp, is_tombstone, delete_horizon)."""
    (row,) = winner_rows(config, visible).values()
    return visible.select(["offset", "timestamp", "is_tombstone", "delete_horizon"]).slice(row, 1).to_pylist()[0]


def _values_bound(config: TopicConfig, mine: pa.Table, winner: dict | None, deleted: bool) -> Bound:
    """The bound of visible values: none while the key's winner holds one; else the cleaning that covers
    the key's records, which SPEC §5 makes due `max.compaction.lag.ms` after the latest of them (the deadline
    roll seals the active segment by then)."""
    if not deleted:
        return Bound(None, "the key's winner holds a value: `compaction forget` the key")
    latest_ts = int(pc.max(mine.column("timestamp")).as_py())
    due = latest_ts + config.max_compaction_lag_ms
    if due > INT64_MAX:
        return Bound(None, "superseded values wait for a cleaning, and max.compaction.lag.ms sets no deadline")
    return Bound(due, "superseded values go with the cleaning max.compaction.lag.ms makes due (SPEC §5)")


def _old_files(handle: LogHandle, current: set[str], keys: list[bytes]) -> dict[bytes, list[OldFile]]:
    """Per key, the files under the log's data folder the current manifest does not name that hold a value
    of it: named by kept versions (readers in flight, pins) or by none (the GC's)."""
    named: dict[str, list[int]] = {}
    for m in handle.recent_manifests():
        for ref in m.files():
            named.setdefault(ref.name, []).append(m.version)
    grace_ms = int(handle.store.gc_grace_s * 1000)
    prefix = handle.path("")
    out: dict[bytes, list[OldFile]] = {}
    wanted = pa.array(keys, pa.binary())
    for path, mtime in handle.st.list_files_with_mtime(handle.path("data")):
        name = path[len(prefix) :].lstrip("/")
        if name in current or not name.endswith(".parquet") or os.path.basename(name).startswith((".", "_")):
            continue
        table = handle.st.read_parquet(path, columns=PROBE_COLUMNS)
        holding = table.filter(
            pc.and_(pc.is_in(table.column("key"), value_set=wanted), pc.invert(table["is_tombstone"]))
        )
        versions = tuple(sorted(named.get(name, [])))
        for key in set(holding.column("key").to_pylist()):
            out.setdefault(key, []).append(OldFile(name, versions, None if versions else mtime + grace_ms))
    return out
