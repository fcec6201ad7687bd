"""The per-log metadata (one immutable, versioned JSON document per change).

It holds everything the planner needs, so that planning never reads records: segment offset ranges,
logical sizes, record counts, timestamps, the delete horizons of kept tombstones, the checkpoint and the
uncleanable state. A logical segment may be made of several files (appends add files to the active one;
merging segments concatenates their file lists).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, NamedTuple

FORMAT = 1


def new_id() -> str:
    """A fresh random identifier for a segment or file."""
    return uuid.uuid4().hex[:16]


class Horizon(NamedTuple):
    """Kept tombstones of a segment that share a delete horizon (a tuple in the manifest's JSON)."""

    horizon: int  # the delete horizon (ms)
    tombstones: int  # tombstones carrying it
    lo: int  # the lowest offset among them
    hi: int  # the highest


@dataclass(frozen=True)
class FileRef:
    name: str  # path relative to the log's folder
    records: int
    stamp: int | None = None  # horizon for tombstones of this file that carry none in their row


@dataclass(frozen=True)
class Segment:
    id: str
    base_offset: int
    next_offset: int
    files: tuple[FileRef, ...] = ()
    records: int = 0
    size: int = 0  # logical bytes (SPEC §4)
    min_ts: int | None = None
    max_ts: int | None = None
    first_ts: int | None = None  # timestamp of the first record
    min_pos_ts: int | None = None  # earliest timestamp > 0 (SPEC §5)
    tombstones: int = 0
    horizons: tuple[Horizon, ...] = ()
    dead: int = 0  # rows of its files listed in the log's deletion vector

    @property
    def empty(self) -> bool:
        return self.records == 0

    @property
    def physical_rows(self) -> int:
        """Rows its files hold: the visible records and those the deletion vector lists."""
        return self.records + self.dead

    def contains(self, offset: int) -> bool:
        return self.base_offset <= offset < self.next_offset

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["files"] = [asdict(f) for f in self.files]
        d["horizons"] = [list(h) for h in self.horizons]
        return d

    @classmethod
    def from_json(cls, decision: dict[str, Any]) -> Segment:
        return cls(
            **{
                **decision,
                "files": tuple(FileRef(**f) for f in decision.get("files", [])),
                "horizons": tuple(Horizon(*(int(x) for x in h)) for h in decision.get("horizons", [])),
            }
        )


def _min(values: Iterable[int | None]) -> int | None:
    vals = [v for v in values if v is not None]
    return min(vals) if vals else None


def _max(values: Iterable[int | None]) -> int | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def merge_horizons(*groups: Iterable[Horizon]) -> tuple[Horizon, ...]:
    """Merge per-file tombstone horizon ranges into one sorted list."""
    merged: dict[int, list[int]] = {}
    for group in groups:
        for h, c, lo, hi in group:
            cur = merged.setdefault(h, [0, lo, hi])
            cur[0] += c
            cur[1], cur[2] = min(cur[1], lo), max(cur[2], hi)
    return tuple(sorted(Horizon(h, c, lo, hi) for h, (c, lo, hi) in merged.items() if c))


def combine(segments: list[Segment]) -> Segment:
    """One logical segment made of consecutive segments (SPEC §6 merging)."""
    first = next((s.first_ts for s in segments if not s.empty), None)
    return Segment(
        id=new_id(),
        base_offset=segments[0].base_offset,
        next_offset=segments[-1].next_offset,
        files=tuple(f for s in segments for f in s.files),
        records=sum(s.records for s in segments),
        size=sum(s.size for s in segments),
        min_ts=_min(s.min_ts for s in segments),
        max_ts=_max(s.max_ts for s in segments),
        first_ts=first,
        min_pos_ts=_min(s.min_pos_ts for s in segments),
        tombstones=sum(s.tombstones for s in segments),
        horizons=merge_horizons(*(s.horizons for s in segments)),
        dead=sum(s.dead for s in segments),
    )


def side_table_name(kind: str) -> str:
    """A new side table's folder, relative to the log: `side/<kind>-<random id>` (log/side_tables.py lists
    the kinds); a manifest names the current ones (`side_files`)."""
    return f"side/{kind}-{uuid.uuid4().hex}"


def side_files(side: dict[str, Any] | None) -> list[str]:
    """The files (or folders) of a side table of the manifest: the deletion vector may have several
    (`files`, one per cleaning that added entries; older manifests name one `file`), the others one."""
    if not side:
        return []
    return list(side["files"]) if "files" in side else [side["file"]]


@dataclass(frozen=True)
class Hold:
    """A kept tombstone that a record above it would otherwise bring back (SPEC §6 guard)."""

    offset: int  # the tombstone's offset
    horizon: int  # its delete horizon
    until: int  # highest offset of a record of its key that loses to it


@dataclass(frozen=True)
class Uncleanable:
    """A log's mark after a cleaning its own data failed: planners skip the log until a success or an operator."""

    error: str  # the failure, on one line
    since_ms: int  # wall clock (ms) when the log was marked

    def to_json(self) -> dict[str, Any]:
        """The mark as the manifest's JSON holds it: {"error", "since_ms"}."""
        return {"error": self.error, "since_ms": self.since_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Uncleanable | None:
        """The mark from the manifest's JSON (None: the log is not marked)."""
        return None if data is None else cls(error=data["error"], since_ms=data["since_ms"])


@dataclass(frozen=True)
class EngineFaults:
    """A log's cleanings stopped in a row by faults that look like the engine's (out of memory, a lost
    worker) while the engine answered afterwards: `strikes` counts those with another log of the store
    cleaned since the one before (the engine did work for others), so a fault of the log's own data (one
    huge record) is told from the machine's. cleaning/faults.py marks the log at enough strikes."""

    strikes: int  # faults with another log cleaned since the one before (the first counts one)
    faults: int  # every such fault in a row
    error: str  # the last, on one line
    last_ms: int  # wall clock (ms) of the last

    def to_json(self) -> dict[str, Any]:
        """As the manifest's JSON holds it: {"strikes", "faults", "error", "last_ms"}."""
        return {"strikes": self.strikes, "faults": self.faults, "error": self.error, "last_ms": self.last_ms}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> EngineFaults | None:
        """From the manifest's JSON (None: no such fault since the log's last cleaning)."""
        return None if data is None else cls(data["strikes"], data["faults"], data["error"], data["last_ms"])


@dataclass(frozen=True)
class LastCleaning:
    """The last cleaning's summary: when and why it ran, the range it cleaned and its totals."""

    now: int | None  # the cleaning's `now` (ms), which names its run
    reason: str | None  # why it ran (the planner's reason, "forced"), or None
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    dirty_ratio: float | None = None  # the log's dirty ratio when it was planned
    files_rewritten: int | None = None
    finished_ms: int | None = None  # wall clock (ms) when it committed
    unique_keys_below: int | None = None  # below this offset it left one visible record per key
    figures: dict[str, int | float] = field(default_factory=dict)  # its totals (CleaningStats), by name

    def to_json(self) -> dict[str, Any]:
        """The summary as the manifest's JSON holds it: one object, the totals beside the other fields; an
        optional field a manifest did not hold stays out (older manifests are written back as they were)."""
        named = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "figures"}
        kept = {k: v for k, v in named.items() if v is not None or k in ("now", "reason")}
        return dict(sorted({**self.figures, **kept}.items()))

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> LastCleaning | None:
        """The summary from the manifest's JSON (None: the log was never cleaned)."""
        if data is None:
            return None
        named = {f.name for f in fields(cls)} - {"figures"}
        return cls(
            now=data.get("now"),
            reason=data.get("reason"),
            **{k: v for k, v in data.items() if k in named - {"now", "reason"}},
            figures={k: v for k, v in data.items() if k not in named},
        )


@dataclass(frozen=True)
class Manifest:
    log: str
    version: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    checkpoint: int = 0
    segments: tuple[Segment, ...] = ()
    holds: tuple[Hold, ...] = ()
    remembered: dict[str, Any] | None = None  # {"file", "count", "min_expiry"}
    tombstone_index: dict[str, Any] | None = None  # {"file", "count"}
    # Deletion vector: offsets a cleaning removed from files it did not rewrite {"files", "count"}; each
    # incremental cleaning adds a folder of its new entries (see `side_files`)
    deleted: dict[str, Any] | None = None
    uncleanable: Uncleanable | None = None
    last_cleaning: LastCleaning | None = None
    engine_faults: EngineFaults | None = None  # cleared by a cleaning, a mark or an operator's clearing
    invalid_records: int = 0
    ingested: tuple[str, ...] = ()  # landing files already appended (idempotent ingestion)
    committed_ms: int = 0
    # how many changes removed records that were not superseded by a later record of their key (a cleaning
    # that removed expired tombstones, retention, a log-start move, a forget): a table that reflects the
    # log at the same count and log start may be brought up by the records appended since (table/commit/tail.py)
    removals: int = 0
    # per lease kind, the highest lease epoch that committed: a lease older than it is fenced off
    fence: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def empty(cls, log: str) -> Manifest:
        return cls(log=log, segments=(Segment("initial", 0, 0),))

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def sealed(self) -> tuple[Segment, ...]:
        return self.segments[:-1]

    @property
    def is_empty_log(self) -> bool:
        return self.log_end_offset == 0 and all(s.empty for s in self.segments)

    @property
    def total_size(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def total_records(self) -> int:
        return sum(s.records for s in self.segments)

    def segment_index(self, offset: int) -> int:
        """Index of the segment containing `offset` (the last one whose base is <= offset)."""
        idx = 0
        for i, seg in enumerate(self.segments):
            if seg.base_offset <= offset:
                idx = i
            else:
                break
        return idx

    def files(self) -> list[FileRef]:
        return [f for s in self.segments for f in s.files]

    def with_(self, **changes: Any) -> Manifest:
        return replace(self, **changes)

    def to_json(self) -> bytes:
        d = {
            "format": FORMAT,
            "log": self.log,
            "version": self.version,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "checkpoint": self.checkpoint,
            "segments": [s.to_json() for s in self.segments],
            "holds": [asdict(h) for h in self.holds],
            "remembered": self.remembered,
            "tombstone_index": self.tombstone_index,
            "deleted": self.deleted,
            "uncleanable": None if self.uncleanable is None else self.uncleanable.to_json(),
            "last_cleaning": None if self.last_cleaning is None else self.last_cleaning.to_json(),
            "invalid_records": self.invalid_records,
            "ingested": list(self.ingested),
            "committed_ms": self.committed_ms,
            "removals": self.removals,
            "fence": self.fence,
            "extra": self.extra,
        }
        if self.engine_faults is not None:  # only then: a manifest without one is written as before
            d["engine_faults"] = self.engine_faults.to_json()
        return json.dumps(d, separators=(",", ":"), sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        d = json.loads(data.decode("utf-8"))
        if d.get("format") != FORMAT:
            raise ValueError(f"unsupported manifest format {d.get('format')!r}")
        d.pop("format")
        d["segments"] = tuple(Segment.from_json(s) for s in d["segments"])
        d["holds"] = tuple(Hold(**h) for h in d.get("holds", []))
        d["ingested"] = tuple(d.get("ingested", []))
        d["uncleanable"] = Uncleanable.from_json(d.get("uncleanable"))
        d["last_cleaning"] = LastCleaning.from_json(d.get("last_cleaning"))
        d["engine_faults"] = EngineFaults.from_json(d.get("engine_faults"))
        # manifests written before the fence had its own field keep it in `extra`
        extra = dict(d.get("extra") or {})
        d["fence"] = {**extra.pop("fence", {}), **d.get("fence", {})}
        d["extra"] = extra
        return cls(**d)


class Attempt(NamedTuple):
    """One try at a log's next version (`LogHandle.attempts`): the newest manifest, and the lease epochs
    a commit on top of it records (its fence)."""

    current: Manifest
    fence: dict[str, int]
