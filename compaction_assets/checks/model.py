"""The checks' own model of SPEC §3-§6: what a cleaning of a log at `now` must leave.

Written from the spec, not from the cleaner: nothing here comes from `cleaning/` or `log/strategies.py`,
so a wrong reading of the spec there is not repeated here. The model reads the log as it was before
the cleaning and as the cleaning committed it, each once, through the log layer (manifests, segment
files with the deletion vector applied), and says for every record of the rewritten range whether it
must stay (and with which delete horizon) or go, and why. The four checks compare `after` with it.

Sizes are those the checks see (one Python pass over the records of the log); the driver holds the
log's visible records twice (before and after) while it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow.parquet as pq

from compaction_assets.log.reader import dead_offsets, read_segment
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import Strategy, TopicConfig

INT64_MAX = 2**63 - 1
OVERHEAD = 16  # SPEC §4: the fixed part of a record's logical size

# Why the model removes a record of the rewritten range (SPEC §6).
SUPERSEDED = "superseded"  # not its key's winner
EXPIRED_TOMBSTONE = "expired_tombstone"  # a winning tombstone at or past its horizon, not held
LOST_TO_REMEMBERED = "lost_to_remembered"  # a winner that loses to a remembered delete

# Columns of the remembered-deletes side table the manifest points to: the removed tombstone's key,
# offset, expiry, and its strategy rank ("m_r_ts" for timestamp; "m_r_hv", "m_r_v" for header).
REMEMBERED_RANK_COLUMNS = {"timestamp": ("m_r_ts",), "header": ("m_r_hv", "m_r_v")}


def saturated(value: int) -> int:
    """`value` clipped to int64 (SPEC §6: exact arithmetic saturating at the bounds)."""
    return max(-(2**63), min(INT64_MAX, value))


@dataclass(frozen=True)
class Rec:
    """One visible record of the log."""

    offset: int
    key: bytes
    value: bytes | None
    timestamp: int
    headers: tuple[tuple[str, bytes | None], ...]
    delete_horizon: int | None

    @property
    def tombstone(self) -> bool:
        """A record with a null value (SPEC §1)."""
        return self.value is None

    def same_content(self, other: Rec) -> bool:
        """Same offset, key, value, timestamp and headers (the delete horizon aside)."""
        return (self.offset, self.key, self.value, self.timestamp, self.headers) == (
            other.offset,
            other.key,
            other.value,
            other.timestamp,
            other.headers,
        )

    def size(self) -> int:
        """Logical size (SPEC §4)."""
        return (
            OVERHEAD
            + len(self.key)
            + len(self.value or b"")
            + sum(len(n.encode("utf-8")) + len(v or b"") for n, v in self.headers)
        )


@dataclass(frozen=True)
class SegmentView:
    """One logical segment with its visible records, in offset order."""

    base_offset: int
    next_offset: int
    records: tuple[Rec, ...]


@dataclass(frozen=True)
class LogView:
    """A log version as a reader sees it (log start and deletion vector applied)."""

    version: int
    log_start_offset: int
    log_end_offset: int
    checkpoint: int
    segments: tuple[SegmentView, ...]

    def records(self) -> list[Rec]:
        """Every visible record, segment by segment."""
        return [r for s in self.segments for r in s.records]


def read_log(handle: LogHandle, manifest: Manifest) -> LogView:
    """Every visible record of one manifest version, read once with pyarrow."""
    dead = dead_offsets(handle, manifest)
    segments = []
    for seg in manifest.segments:
        records: tuple[Rec, ...] = ()
        if seg.files:
            table = read_segment(handle, seg, manifest.log_start_offset, dead)
            # column by column (binary columns come out as bytes): a row's dict built per record cost
            # half of a fleet's checks (5,000 records a log)
            columns = [
                table.column(name).to_pylist()
                for name in ("offset", "key", "value", "timestamp", "headers", "delete_horizon")
            ]
            records = tuple(
                Rec(
                    offset,
                    key,
                    value,
                    timestamp,
                    tuple((h["name"], h["value"]) for h in headers) if headers else (),
                    horizon,
                )
                for offset, key, value, timestamp, headers, horizon in zip(*columns)
            )
        segments.append(SegmentView(seg.base_offset, seg.next_offset, records))
    return LogView(
        manifest.version, manifest.log_start_offset, manifest.log_end_offset, manifest.checkpoint, tuple(segments)
    )


def header_version(headers: tuple[tuple[str, bytes | None], ...], name: str | None) -> int | None:
    """SPEC §6: the last header named exactly `name`, as an 8-byte big-endian signed long; else None."""
    value = None
    found = False
    for hname, hvalue in headers:
        if hname == name:
            value, found = hvalue, True
    if not found or value is None or len(value) != 8:
        return None
    return int.from_bytes(value, "big", signed=True)


def rank(record: Rec, config: TopicConfig) -> tuple:
    """The order of one key's records (SPEC §6): the greater tuple wins; offsets break every tie."""
    if config.strategy == Strategy.TIMESTAMP:
        return (record.timestamp, record.offset)
    if config.strategy == Strategy.HEADER:
        version = header_version(record.headers, config.strategy_header)
        return (0, 0, record.offset) if version is None else (1, version, record.offset)
    return (record.offset,)


@dataclass(frozen=True)
class RememberedDelete:
    """A removed tombstone's key and rank, remembered until `expiry` (SPEC §6)."""

    key: bytes
    rank: tuple
    offset: int
    expiry: int


def read_remembered(handle: LogHandle, manifest: Manifest, config: TopicConfig) -> list[RememberedDelete]:
    """The remembered deletes a manifest points to (none for the offset strategy)."""
    columns = REMEMBERED_RANK_COLUMNS.get(config.strategy)
    if not manifest.remembered or columns is None:
        return []
    st = handle.st
    table = pq.read_table(handle.path(manifest.remembered["file"]), filesystem=None if st.local else st.fs)
    out = []
    for row in table.to_pylist():
        parts = tuple(int(row[c]) for c in columns)  # a header rank's "has a version" flag as 0/1
        out.append(
            RememberedDelete(
                bytes(row["key"]), parts + (int(row["m_offset"]),), int(row["m_offset"]), int(row["m_expiry"])
            )
        )
    return out


def first_dirty_offset(view: LogView) -> int:
    """SPEC §3: the checkpoint, or the log start when the checkpoint lies outside [log start, LEO]."""
    c = view.checkpoint
    return c if view.log_start_offset <= c <= view.log_end_offset else view.log_start_offset


def first_uncleanable_offset(view: LogView, config: TopicConfig, now: int) -> int:
    """SPEC §3: the active segment's base, or the first too-young segment from first_dirty on."""
    fd = first_dirty_offset(view)
    u = view.segments[-1].base_offset
    if config.min_compaction_lag_ms > 0:
        for seg in view.segments[:-1]:
            if seg.next_offset <= fd or not seg.records:
                continue
            if max(r.timestamp for r in seg.records) > now - config.min_compaction_lag_ms:
                u = min(u, seg.base_offset)
                break
    return fd if u < fd else u


@dataclass
class Expectation:
    """What a correct cleaning of `before` at `now` leaves in its rewritten range (SPEC §6)."""

    first_dirty: int
    first_uncleanable: int
    range_segments: int  # how many of before's segments are rewritten
    range_end: int  # offsets below it are in the rewritten range
    winners: dict[bytes, Rec] = field(default_factory=dict)
    kept: dict[int, Rec] = field(default_factory=dict)  # offset -> the record as it must read
    removed: dict[int, tuple[Rec, str]] = field(default_factory=dict)  # offset -> (record, why)
    held: set[int] = field(default_factory=set)  # expired tombstones kept by the guard
    newly_remembered: list[RememberedDelete] = field(default_factory=list)
    remembered_before: list[RememberedDelete] = field(default_factory=list)  # still in force at `now`
    layout: list[tuple[int, int]] = field(default_factory=list)  # the range's segments after merging
    stamp: int = 0  # the horizon a first-kept tombstone gets


def expect(before: LogView, config: TopicConfig, now: int, remembered: list[RememberedDelete]) -> Expectation:
    """The model: winners, what stays and what goes, the new delete horizons, holds, remembered deletes."""
    fd = first_dirty_offset(before)
    u = first_uncleanable_offset(before, config, now)
    rewritten = [s for s in before.segments[:-1] if s.next_offset <= u]
    k = len(rewritten)
    range_end = rewritten[-1].next_offset if rewritten else before.segments[0].base_offset
    guard = config.strategy != Strategy.OFFSET
    stamp = saturated(now + config.delete_retention_ms)
    live = [m for m in remembered if now < m.expiry]  # a remembered delete counts until its expiry
    exp = Expectation(fd, u, k, range_end, stamp=stamp, remembered_before=live)

    inside = [r for s in rewritten for r in s.records]
    for r in inside:
        w = exp.winners.get(r.key)
        if w is None or rank(r, config) > rank(w, config):
            exp.winners[r.key] = r
    outside = [r for s in before.segments[k:] for r in s.records]
    losers_outside: dict[bytes, list[tuple]] = {}
    if guard:
        for r in outside:
            losers_outside.setdefault(r.key, []).append(rank(r, config))
    best_remembered: dict[bytes, tuple] = {}
    for m in live:
        if m.key not in best_remembered or m.rank > best_remembered[m.key]:
            best_remembered[m.key] = m.rank

    for r in inside:
        w = exp.winners[r.key]
        if r.offset != w.offset:
            exp.removed[r.offset] = (r, SUPERSEDED)
            continue
        mine = rank(r, config)
        if guard and r.key in best_remembered and mine < best_remembered[r.key]:
            exp.removed[r.offset] = (r, LOST_TO_REMEMBERED)
            continue
        if not r.tombstone:
            exp.kept[r.offset] = r
        elif r.delete_horizon is None:  # its first cleaning: stamped, kept
            exp.kept[r.offset] = Rec(r.offset, r.key, r.value, r.timestamp, r.headers, stamp)
        elif now < r.delete_horizon:
            exp.kept[r.offset] = r
        elif guard and any(o < mine for o in losers_outside.get(r.key, ())):
            exp.kept[r.offset] = r
            exp.held.add(r.offset)
        else:
            exp.removed[r.offset] = (r, EXPIRED_TOMBSTONE)
            if guard:
                exp.newly_remembered.append(RememberedDelete(r.key, mine, r.offset, stamp))

    # SPEC §6 merging: a segment joins the group before it while their size after cleaning fits
    groups: list[list] = []
    for s in rewritten:
        size = sum(r.size() for r in s.records if r.offset in exp.kept)
        if groups and groups[-1][2] + size <= config.segment_bytes:
            groups[-1][1], groups[-1][2] = s.next_offset, groups[-1][2] + size
        else:
            groups.append([s.base_offset, s.next_offset, size])
    exp.layout = [(g[0], g[1]) for g in groups]
    return exp


@dataclass
class CleaningUnderCheck:
    """A cleaning to verify: the log before and after it, when it ran, and the model's expectation."""

    log: str
    config: TopicConfig
    now: int
    cleaned: bool
    before: LogView
    after: LogView
    expectation: Expectation
    remembered_after: list[RememberedDelete]


def load(
    handle: LogHandle, config: TopicConfig, before: Manifest, after: Manifest, now: int, cleaned: bool
) -> CleaningUnderCheck:
    """Read both versions once and build the model (the one pass the four checks share)."""
    before_view = read_log(handle, before)
    after_view = before_view if after.version == before.version else read_log(handle, after)
    exp = expect(before_view, config, now, read_remembered(handle, before, config))
    return CleaningUnderCheck(
        handle.name, config, now, cleaned, before_view, after_view, exp, read_remembered(handle, after, config)
    )
