"""Forgetting keys on request (a GDPR erasure): the value of a key leaves the log's current files at once,
without taking an offset.

In one manifest commit, the key's winner (by the topic's strategy, SPEC §6) is rewritten in place into a
tombstone (same offset, timestamp and headers; value and delete horizon null) and every other row of the
key is removed (an offset gap, which SPEC §1 allows). Offsets never move and no offset is taken, so a
connector's next file (explicit offsets at or above the log end) still lands, and a later record of the
key re-creates it as in Kafka. The tombstone then lives by SPEC §6: the next cleaning that keeps it stamps
its horizon, a cleaning after the horizon removes it.

The files holding rows of the keys are rewritten into new files (the old ones go by the store's garbage
collection once no kept manifest version names them); rows a rewritten file held that no reader sees
(below the log start, or in the deletion vector) are left out too, so the key's old bytes leave with them.
The forget holds the log's append lease (so its offsets never race an append, and the garbage
collection keeps its files while it writes), and commits only if the segments it rewrote are still the
log's: a cleaning that read them before fails its own commit with its usual ConflictError, and a forget
that lost to a concurrent change (a deadline roll, a cleaning) is done again on the newer manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import ConflictError, InvalidInputError
from compaction_assets.log.reader import dead_offsets, read_file, restat
from compaction_assets.log.strategies import strategy_of
from compaction_assets.log.writer import _delete, write_file
from compaction_assets.segments.arrays import from_numpy, in_sorted, to_numpy, visible_mask
from compaction_assets.segments.records import SEGMENT_SCHEMA, with_derived_columns
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import FileRef, Manifest, Segment, new_id
from compaction_assets.topics.config import TopicConfig

FORGET_ATTEMPTS = 5  # a forget is planned again when a concurrent change replaced a segment it rewrote
FIND_COLUMNS = ["offset", "key"]  # the narrow read that finds the files holding rows of the keys


@dataclass(frozen=True)
class KeyForgotten:
    """What a forget did to one key in one log."""

    key: bytes
    tombstone_offset: int | None  # the key's winner, now a tombstone (None: the log holds no row of the key)
    was_tombstone: bool  # the winner was a tombstone already (the key was deleted; older values may remain)
    removed_offsets: tuple[int, ...]  # the key's other visible records, removed
    hidden_rows_removed: int  # rows of the key no reader saw (below the log start, deletion vector), dropped

    @property
    def changed(self) -> bool:
        """Whether the forget changed anything of this key (a value nulled or a row removed)."""
        nulled = self.tombstone_offset is not None and not self.was_tombstone
        return nulled or bool(self.removed_offsets) or bool(self.hidden_rows_removed)

    def as_document(self) -> dict[str, object]:
        """The key's outcome as the command shows it (the key itself is shown by the caller)."""
        if self.tombstone_offset is None:
            return {"held": False}
        return {
            "held": True,
            "tombstone_offset": self.tombstone_offset,
            "was_tombstone": self.was_tombstone,
            "removed_offsets": list(self.removed_offsets),
            "hidden_rows_removed": self.hidden_rows_removed,
        }


@dataclass(frozen=True)
class ForgetResult:
    """What a forget did to one log: per key, and the files and version it committed."""

    log: str
    keys: tuple[KeyForgotten, ...]
    files_rewritten: int = 0
    segments_rewritten: int = 0
    version: int | None = None  # the manifest version committed (None: nothing to change)
    attempts: int = 1

    @property
    def changed(self) -> bool:
        return self.version is not None

    def of(self, key: bytes) -> KeyForgotten:
        """The outcome of one key."""
        return next(k for k in self.keys if k.key == key)


@dataclass(frozen=True)
class _FileChange:
    """One rewritten file: the segment holding it, the old file, its new rows, and the rows of the
    deletion vector it held (they leave with it)."""

    segment: str
    old: FileRef
    rows: pa.Table
    dead_dropped: int


@dataclass
class _Plan:
    """What a forget changes on one manifest."""

    keys: list[KeyForgotten] = field(default_factory=list)
    files: list[_FileChange] = field(default_factory=list)
    removed: set[int] = field(default_factory=set)  # visible offsets removed (holds on them go)


def forget(handle: LogHandle, config: TopicConfig, keys: Sequence[bytes]) -> ForgetResult:
    """Forget `keys` in the log: winners nulled in place into tombstones, every other row of the keys
    removed, in one commit that adds one to the manifest's `removals`; nothing when the log holds no value
    of them."""
    wanted = _checked_keys(keys)
    with handle.lock("append", purpose=f"forget {len(wanted)} key(s)"):
        for attempt in range(1, FORGET_ATTEMPTS + 1):
            base = handle.manifest()
            plan = _plan(handle, config, base, wanted)
            if not plan.files:
                return ForgetResult(handle.name, tuple(plan.keys), attempts=attempt)
            written: list[FileRef] = []
            try:
                segments = _rewritten_segments(handle, base, plan, written)
                committed = handle.update(_commit_change(handle, base, segments, plan.removed))
                # the versions before name the files that held the values: dropped, they go at the next GC
                handle.drop_versions_before(committed.version)
            except ConflictError:
                _delete(handle, written)  # named by no manifest: the next attempt writes its own
                if attempt == FORGET_ATTEMPTS:
                    raise
                continue
            except BaseException:
                _delete(handle, written)
                raise
            return ForgetResult(
                handle.name, tuple(plan.keys), len(plan.files), len(segments), committed.version, attempt
            )
    raise AssertionError("the last attempt returns or raises")


def _checked_keys(keys: Sequence[bytes]) -> list[bytes]:
    """The keys, each once, in order; one line for none or a key that is not bytes."""
    if not keys:
        raise InvalidInputError("forget: name at least one key")
    for key in keys:
        if not isinstance(key, bytes):
            raise InvalidInputError(f"forget: key {key!r} is not bytes")
    return list(dict.fromkeys(keys))


def key_rows(handle: LogHandle, manifest: Manifest, keys: list[bytes]) -> list[tuple[Segment, FileRef, pa.Table]]:
    """Every file of the manifest that holds a row of `keys` (visible or not), whole, as SEGMENT_SCHEMA with
    its stamp applied (a narrow read of offsets and keys finds them; those are read whole)."""
    wanted = pa.array(keys, pa.binary())
    found = []
    for seg in manifest.segments:
        for ref in seg.files:
            narrow = handle.st.read_parquet(handle.path(ref.name), columns=FIND_COLUMNS)
            if pc.any(pc.is_in(narrow.column("key"), value_set=wanted)).as_py():
                found.append((seg, ref, read_file(handle, ref)))
    return found


def _plan(handle: LogHandle, config: TopicConfig, manifest: Manifest, keys: list[bytes]) -> _Plan:
    """The keys' winners and the files to rewrite, from the files holding rows of the keys."""
    dead = dead_offsets(handle, manifest)
    dead_np = to_numpy(dead) if dead is not None else None
    holding = key_rows(handle, manifest, keys)
    wanted = pa.array(keys, pa.binary())
    rows = [t.filter(pc.is_in(t.column("key"), value_set=wanted)) for _, _, t in holding]
    mine = pa.concat_tables(rows) if rows else SEGMENT_SCHEMA.empty_table()
    shown = visible_mask(to_numpy(mine.column("offset")), manifest.log_start_offset, dead_np)
    visible = mine.filter(from_numpy(shown))
    offsets_shown, tombs_shown = visible.column("offset").to_pylist(), visible.column("is_tombstone").to_pylist()
    winners = {k: (offsets_shown[i], tombs_shown[i]) for k, i in winner_rows(config, visible).items()}
    plan = _Plan()
    drop: set[int] = set()
    null: set[int] = set()
    offsets, names = to_numpy(mine.column("offset")), mine.column("key").to_pylist()
    for key in keys:
        of_key = np.array([name == key for name in names], dtype=bool)
        winner = winners.get(key)
        if winner is None:
            plan.keys.append(KeyForgotten(key, None, False, (), int(of_key.sum())))
            drop.update(int(o) for o in offsets[of_key])  # only rows no reader sees: they go too
            continue
        offset, was_tombstone = winner
        others = of_key & (offsets != offset)
        removed = tuple(sorted(int(o) for o in offsets[others & shown]))
        hidden = int((others & ~shown).sum())
        plan.keys.append(KeyForgotten(key, offset, was_tombstone, removed, hidden))
        drop.update(int(o) for o in offsets[others])
        if not was_tombstone:
            null.add(offset)
    plan.removed = {o for k in plan.keys for o in k.removed_offsets}
    if drop or null:
        plan.files = [
            change
            for seg, ref, table in holding
            if (change := _file_change(seg, ref, table, drop, null, manifest.log_start_offset, dead_np)) is not None
        ]
    return plan


def winner_rows(config: TopicConfig, visible: pa.Table) -> dict[bytes, int]:
    """Per key of `visible` (visible rows of a few keys): the row of its winner (SPEC §6: the greatest
    (rank, offset) by the topic's strategy)."""
    strategy = strategy_of(config)
    ranks = strategy.arrow_ranks(visible)
    columns = [ranks[c].to_pylist() for c in strategy.rank_columns]
    best: dict[bytes, tuple[tuple, int]] = {}
    for i, (key, offset) in enumerate(
        zip(visible.column("key").to_pylist(), visible.column("offset").to_pylist(), strict=True)
    ):
        order = (*(c[i] for c in columns), offset)
        if key not in best or order > best[key][0]:
            best[key] = (order, i)
    return {key: row for key, (_, row) in best.items()}


def _file_change(
    seg: Segment,
    ref: FileRef,
    table: pa.Table,
    drop: set[int],
    null: set[int],
    log_start: int,
    dead: np.ndarray | None,
) -> _FileChange | None:
    """The file's new rows (None when the forget changes none of its rows): the dropped rows, those below
    the log start and those of the deletion vector left out, the nulled winners made tombstones."""
    offsets = to_numpy(table.column("offset"))
    dropped = np.isin(offsets, np.fromiter(drop, np.int64, len(drop)))
    nulled = np.isin(offsets, np.fromiter(null, np.int64, len(null)))
    if not (dropped.any() or nulled.any()):
        return None
    in_vector = in_sorted(offsets, dead) if dead is not None and len(dead) else np.zeros(len(offsets), dtype=bool)
    keep = ~dropped & ~in_vector & (offsets >= log_start)
    kept = table.filter(from_numpy(keep))
    mask = from_numpy(nulled[keep])
    kept = kept.set_column(
        kept.schema.get_field_index("value"), "value", pc.if_else(mask, pa.scalar(None, pa.binary()), kept["value"])
    )
    kept = kept.set_column(
        kept.schema.get_field_index("delete_horizon"),
        "delete_horizon",
        # the new tombstone has no horizon yet: the next cleaning that keeps it stamps one (SPEC §6)
        pc.if_else(mask, pa.scalar(None, pa.int64()), kept["delete_horizon"]),
    )
    return _FileChange(seg.id, ref, with_derived_columns(kept), int(in_vector.sum()))


def _rewritten_segments(handle: LogHandle, base: Manifest, plan: _Plan, written: list[FileRef]) -> dict[str, Segment]:
    """The segments holding the changed files, with their new files (written here, named in `written`)
    and their figures recomputed from their visible records; by the id of the segment each replaces."""
    by_segment: dict[str, list[_FileChange]] = {}
    for change in plan.files:
        by_segment.setdefault(change.segment, []).append(change)
    dead = dead_offsets(handle, base)
    out: dict[str, Segment] = {}
    for seg in base.segments:
        changes = {c.old.name: c for c in by_segment.get(seg.id, [])}
        if not changes:
            continue
        files: list[FileRef] = []
        for ref in seg.files:
            rewritten = changes.get(ref.name)
            if rewritten is None:
                files.append(ref)
            elif len(rewritten.rows):  # the stamp is in the rows now (read_file applied it)
                new = write_file(handle, rewritten.rows)
                written.append(new)
                files.append(new)
        dropped = sum(c.dead_dropped for c in changes.values())
        reshaped = replace(seg, id=new_id(), files=tuple(files), dead=max(seg.dead - dropped, 0))
        out[seg.id] = restat(handle, reshaped, base.log_start_offset, dead) if files else _emptied(reshaped)
    return out


def _emptied(seg: Segment) -> Segment:
    """A segment left without a file keeps its offset range (SPEC §6: offsets never move)."""
    return Segment(new_id(), seg.base_offset, seg.next_offset)


def _commit_change(handle: LogHandle, base: Manifest, segments: dict[str, Segment], removed: set[int]):
    """The manifest change: the rewritten segments in place of theirs, holds on removed tombstones gone,
    one more removal; a ConflictError when a concurrent change replaced one of them (or the log start or
    the deletion vector moved), so the forget is planned again."""

    def change(manifest: Manifest) -> Manifest:
        ids = {s.id for s in manifest.segments}
        if (
            not set(segments) <= ids
            or manifest.log_start_offset != base.log_start_offset
            or manifest.deleted != base.deleted
        ):
            raise ConflictError(f"log {handle.name!r} changed during the forget; nothing was changed")
        return manifest.with_(
            segments=tuple(segments.get(s.id, s) for s in manifest.segments),
            holds=tuple(h for h in manifest.holds if h.offset not in removed),
            removals=manifest.removals + 1,
        )

    return change
