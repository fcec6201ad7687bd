"""What a cleaning decided, before anything is written (Kafka's `OffsetMap` and `LogToClean` in one).

Three variants, by where the decision lives:
  CachedDecision     every winner with its decision columns, cached in Spark (a large range);
  CollectedDecision  the kept winners' offsets here, in this process (a small range: no cache, one job);
  ProbedDecision     a collected decision of the newer segments plus, for the deduplicated prefix that the
                     offset strategy probes segment by segment, the offsets those segments lose.
All carry the figures per segment and the totals; the write reads `write_offsets` and `probed_segments`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.figures import CleaningStats, SegmentFigures
from compaction_assets.log.manifest import Horizon, Segment
from compaction_assets.log.reader import bucket_labels

# what the later steps read of a decision (with the strategy's rank columns)
DECISION_COLUMNS = ("key", "offset", "timestamp", "tomb", "size", "until", "seg_idx", "removed_tomb", "keep",
                    "stamped", "new_horizon")
# the kept (or, for a probed segment, removed) offsets the write receives, with their segment
OFFSETS_SCHEMA = pa.schema([("offset", pa.int64()), ("seg_idx", pa.int32())])


@dataclass(kw_only=True)
class Decision:
    """The outcome of the decide phase: per segment what the cleaning keeps, and its totals."""
    figures: dict[int, SegmentFigures]
    horizons: dict[int, list[Horizon]]      # per segment, its kept tombstones' horizons
    stats: CleaningStats                    # the decision's totals (the write's figures are added later)
    new_horizon: int                        # the delete horizon this cleaning stamps on bare tombstones
    only_touched_keys: bool = False         # the group-by saw only keys that rows above the unique prefix touch

    def release(self) -> None:
        """Drop what the decision holds in Spark (a collected decision holds nothing there)."""

    def write_offsets(self) -> pa.Table | None:
        """The offsets the write receives (OFFSETS_SCHEMA) when they are here already, else None."""
        return None

    def probed_segments(self) -> frozenset[int]:
        """Segments whose offsets in `write_offsets` are the removed ones, not the kept ones."""
        return frozenset()

    def guard_rows(self):
        """Spark DataFrame (DECISION_COLUMNS) of the winners the guard's outputs read, or None."""
        return None


@dataclass(kw_only=True)
class CachedDecision(Decision):
    """Decided and cached in Spark: the write ships the kept offsets from there."""
    winners: object                         # Spark DataFrame of every winner (DECISION_COLUMNS), cached

    def release(self) -> None:
        """Unpersist the cached winners."""
        self.winners.unpersist()

    def guard_rows(self):
        """Every winner."""
        return self.winners


@dataclass(kw_only=True)
class CollectedDecision(Decision):
    """Decided in Spark, collected here in one job: the kept winners' offsets by segment."""
    kept: pa.Table                          # OFFSETS_SCHEMA: every kept winner
    tombstones: object = None               # Spark DataFrame of the decided tombstones for the guard's
                                            # outputs (DECISION_COLUMNS); None under the offset strategy

    def write_offsets(self) -> pa.Table:
        """The kept winners."""
        return self.kept

    def guard_rows(self):
        """The decided tombstones (the guard reads nothing else)."""
        return self.tombstones


@dataclass(kw_only=True)
class ProbedDecision(CollectedDecision):
    """The offset strategy's incremental decision: the newer segments grouped, the prefix probed."""
    removed: pa.Table                       # OFFSETS_SCHEMA: the records the probed segments lose
    probed: frozenset[int] = field(default_factory=frozenset)   # the probed segments

    def write_offsets(self) -> pa.Table:
        """The kept winners of the newer segments, then the removed offsets of the probed ones."""
        return pa.concat_tables([self.kept.cast(OFFSETS_SCHEMA), self.removed])

    def probed_segments(self) -> frozenset[int]:
        """The probed segments."""
        return self.probed


def offset_decision(winners: pa.Table, range_segs: list[tuple[int, Segment]], now: int, new_horizon: int) -> pa.Table:
    """The offset strategy's decision columns of collected winners (offset, timestamp, tomb,
    delete_horizon, size), with Arrow: as `decide`'s Spark projection (`decision_columns`) computes them
    when nothing is remembered or held (that strategy has no resurrection guard)."""
    tomb, horizon = winners.column("tomb"), winners.column("delete_horizon")
    expired = pc.and_(tomb, pc.fill_null(pc.greater_equal(pa.scalar(now, pa.int64()), horizon), False))
    keep = pc.invert(expired)
    kept_tomb = pc.and_(keep, tomb)
    seg_idx = bucket_labels([(i, seg.base_offset) for i, seg in range_segs], winners.column("offset").to_numpy())
    return winners.append_column("seg_idx", pa.array(seg_idx, pa.int32())).append_column(
        "removed_tomb", expired).append_column("keep", keep).append_column(
        "stamped", pc.and_(kept_tomb, pc.is_null(horizon))).append_column(
        "new_horizon", pc.if_else(kept_tomb, pc.coalesce(horizon, pa.scalar(new_horizon, pa.int64())),
                                  pa.scalar(None, pa.int64())))


def kept_offsets(table: pa.Table) -> pa.Table:
    """The (offset, seg_idx) of the kept winners of a collected decision table."""
    return table.filter(table.column("keep")).select(["offset", "seg_idx"])
