"""What a cleaning decides, before anything is written (Kafka's `LogToClean` and `CleanerStats`): the
outcome's variants and its figures (the winners themselves are found by the routes of cleaner.py's `decide`).

The outcome, in four variants by where the decision lives:
  CachedDecision     every winner with its decision columns, cached in Spark (a large range);
  CollectedDecision  the kept winners' offsets here, in this process (a small range: no cache, one job);
  TaskDecision       a collected decision made in the group-by's tasks (the offset strategy's large
                     range): only the kept offsets and the figures came here;
  ProbedDecision     a collected decision of the newer segments plus, for the deduplicated prefix that the
                     offset strategy probes segment by segment, the offsets those segments lose.
All carry the figures per segment and the totals; the write reads `write_offsets` and `probed_segments`.

The figures (`SegmentFigures` per segment, `CleaningStats` the totals it reports) are aggregated by
segment and kept-tombstone horizon, either by Spark (a decision cached there: `spark_figures`) or with
Arrow (the offset strategy's decision, here or in tasks: `arrow_figures` in decide/arrow_decision.py). The two are
twins on purpose: Arrow saves a Spark job on small ranges and a cache on large ones; both give the same
rows (tests/cleaning/test_small_and_large_paths.py, test_collected_and_cached_decisions_have_the_same_figures),
which `segment_figures` merges.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from compaction_assets.store.manifest import Horizon, Segment

if TYPE_CHECKING:  # pyspark only when a cleaning runs (Spark-free commands start faster)
    from pyspark.sql import DataFrame


@dataclass
class SegmentFigures:
    """What a cleaning reads of one segment of its range and what it keeps of it (SPEC §4 figures)."""

    physical: int  # rows its files hold (those the deletion vector lists included)
    read: int  # its visible records
    bytes_read: int  # their logical bytes
    kept: int = 0  # records it keeps
    kept_bytes: int = 0
    min_ts: int | None = None  # of the kept records
    max_ts: int | None = None
    first_ts: int | None = None  # the timestamp of its first kept record
    min_pos_ts: int | None = None  # the earliest kept timestamp > 0
    tombstones: int = 0  # kept tombstones
    stamped: int = 0  # kept tombstones that get this cleaning's horizon
    removed_tomb: int = 0  # tombstones removed (their horizon passed)
    removed_bytes: int = 0  # their bytes
    unchanged: bool = False  # probed and loses nothing: keeps its files and its vector entries


@dataclass
class CleaningStats:
    """A cleaning's totals (Kafka's `CleanerStats`); `as_dict` is the JSON the CLI and Dagster report."""

    records_read: int = 0
    records_written: int = 0
    tombstones_stamped: int = 0
    tombstones_removed: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_superseded: int = 0
    cleaner_recopy_percent: float = 0.0
    segments_rewritten: int = 0
    segments_marked: int = 0
    records_rewritten: int = 0
    files_bytes_written: int = 0
    deletion_vector_records: int = 0
    clean_time_secs: float = 0.0

    def as_dict(self) -> dict:
        """The totals by name, as JSON and metadata carry them."""
        return asdict(self)

    @classmethod
    def of(cls, figures: dict[str, int | float]) -> CleaningStats:
        """The totals a manifest's `last_cleaning.figures` holds (a total it lacks is 0)."""
        # ints and floats by field: the dataclass gives each its type, not this dict
        known: dict[str, Any] = {f.name: figures[f.name] for f in fields(cls) if f.name in figures}
        return cls(**known)


# the figures one row of `spark_figures` / `arrow_figures` (decide/arrow_decision.py) sums, by (seg_idx, hkey)
SUMMED = ("kept", "kept_bytes", "tombstones", "stamped", "removed_tomb", "removed_bytes")


def spark_figures(decided) -> list:
    """The figures of a cached decision by segment and kept-tombstone horizon (`hkey`, null for other
    records; merged per segment by `segment_figures`), aggregated by Spark in one job."""
    from pyspark.sql import functions as F  # pyspark only when a cleaning runs (Spark-free commands start faster)

    keep = F.col("keep")
    hkey = F.when(keep & F.col("tomb"), F.col("new_horizon")).alias("hkey")
    return (
        decided.groupBy("seg_idx", hkey)
        .agg(
            F.sum(keep.cast("long")).alias("kept"),
            F.sum(F.when(keep, F.col("size"))).alias("kept_bytes"),
            F.min(F.when(keep, F.col("timestamp"))).alias("min_ts"),
            F.max(F.when(keep, F.col("timestamp"))).alias("max_ts"),
            # fixed-width buffers keep this a hash aggregation (a struct's minimum forced a sort)
            F.min(F.when(keep, F.col("offset"))).alias("first_offset"),
            F.min_by(F.when(keep, F.col("timestamp")), F.when(keep, F.col("offset"))).alias("first_ts"),
            F.min(F.when(keep & (F.col("timestamp") > 0), F.col("timestamp"))).alias("min_pos_ts"),
            F.sum((keep & F.col("tomb")).cast("long")).alias("tombstones"),
            F.sum(F.col("stamped").cast("long")).alias("stamped"),
            F.sum(F.col("removed_tomb").cast("long")).alias("removed_tomb"),
            F.min(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_lo"),
            F.max(F.when(keep & F.col("tomb"), F.col("offset"))).alias("tomb_hi"),
            F.sum(F.when(F.col("removed_tomb"), F.col("size"))).alias("removed_bytes"),
        )
        .collect()
    )


def segment_figures(
    rows: list, range_segs: list[tuple[int, Segment]]
) -> tuple[dict[int, SegmentFigures], dict[int, list[Horizon]]]:
    """Per segment (and its kept tombstones' horizons) from the figures by (seg_idx, hkey); rows of one
    (seg_idx, hkey) from several tasks (decide/arrow_decision.py) add up."""
    figures = {i: SegmentFigures(s.physical_rows, s.records, s.size) for i, s in range_segs if s.records}
    by_horizon: dict[int, dict[int, Horizon]] = {}
    first: dict[int, tuple[int, int]] = {}  # per segment, (offset, timestamp) of its first kept record
    for r in rows:
        idx = r["seg_idx"]
        if r["hkey"] is not None:
            seen = by_horizon.setdefault(idx, {})
            new = Horizon(int(r["hkey"]), int(r["tombstones"]), int(r["tomb_lo"]), int(r["tomb_hi"]))
            old = seen.get(new.horizon)
            seen[new.horizon] = (
                new
                if old is None
                else Horizon(new.horizon, old.tombstones + new.tombstones, min(old.lo, new.lo), max(old.hi, new.hi))
            )
        cur = figures[idx]
        for name in SUMMED:
            setattr(cur, name, getattr(cur, name) + int(r[name] or 0))
        for name, pick in (("min_ts", min), ("max_ts", max), ("min_pos_ts", min)):
            if r[name] is not None:
                setattr(cur, name, r[name] if getattr(cur, name) is None else pick(getattr(cur, name), r[name]))
        if r["first_offset"] is not None:
            pair = (r["first_offset"], r["first_ts"])
            first[idx] = pair if idx not in first else min(first[idx], pair)
    for idx, (_, first_ts) in first.items():
        figures[idx].first_ts = first_ts
    return figures, {idx: list(seen.values()) for idx, seen in by_horizon.items()}


def segment_starts(segments: list[tuple[int, Segment]]) -> list[tuple[int, int]]:
    """(index, base offset) of each segment: what finds a winner's segment from its offset."""
    return [(i, seg.base_offset) for i, seg in segments]


def totals(figures: dict[int, SegmentFigures]) -> CleaningStats:
    """A decision's totals (records read, written, removed; bytes) from its figures per segment."""

    def total(name: str) -> int:
        return int(sum(getattr(p, name) for p in figures.values()))

    read, written, removed = total("read"), total("kept"), total("removed_tomb")
    bytes_read, bytes_written = total("bytes_read"), total("kept_bytes")
    return CleaningStats(
        records_read=read,
        records_written=written,
        tombstones_stamped=total("stamped"),
        tombstones_removed=removed,
        bytes_read=bytes_read,
        bytes_written=bytes_written,
        records_superseded=read - written - removed,
        cleaner_recopy_percent=100.0 * bytes_written / bytes_read if bytes_read else 0.0,
    )


# what the later steps read of a decision (with the strategy's rank columns)
DECISION_COLUMNS = (
    "key",
    "offset",
    "timestamp",
    "tomb",
    "size",
    "until",
    "seg_idx",
    "removed_tomb",
    "keep",
    "stamped",
    "new_horizon",
)
# the kept (or, for a probed segment, removed) offsets the write receives, with their segment
OFFSETS_SCHEMA = pa.schema([("offset", pa.int64()), ("seg_idx", pa.int32())])


@dataclass(kw_only=True)
class Decision:
    """The outcome of the decide phase: per segment what the cleaning keeps, and its totals."""

    figures: dict[int, SegmentFigures]
    horizons: dict[int, list[Horizon]]  # per segment, its kept tombstones' horizons
    stats: CleaningStats  # the decision's totals (the write's figures are added later)
    new_horizon: int  # the delete horizon this cleaning stamps on bare tombstones
    only_touched_keys: bool = False  # the group-by saw only keys that rows above the unique prefix touch

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

    winners: DataFrame  # every winner (DECISION_COLUMNS), cached

    def release(self) -> None:
        """Unpersist the cached winners."""
        self.winners.unpersist()

    def guard_rows(self):
        """Every winner."""
        return self.winners


@dataclass(kw_only=True)
class CollectedDecision(Decision):
    """Decided in Spark, collected here in one job: the kept winners' offsets by segment."""

    kept: pa.Table  # OFFSETS_SCHEMA: every kept winner
    tombstones: DataFrame | None = None  # the decided tombstones for the guard's
    # outputs (DECISION_COLUMNS); None under the offset strategy

    def write_offsets(self) -> pa.Table:
        """The kept winners."""
        return self.kept

    def guard_rows(self):
        """The decided tombstones (the guard reads nothing else)."""
        return self.tombstones


@dataclass(kw_only=True)
class TaskDecision(CollectedDecision):
    """Decided in the tasks of the group-by that found the winners (decide/arrow_decision.py): their kept offsets
    by segment and their figures came here, the winners stayed in Spark's tasks."""


@dataclass(kw_only=True)
class LocalDecision(CollectedDecision):
    """Decided in this process with Arrow from the range's narrow columns (decide/arrow_decision.py): no Spark job."""


@dataclass(kw_only=True)
class ProbedDecision(CollectedDecision):
    """The offset strategy's incremental decision: the newer segments grouped, the prefix probed."""

    removed: pa.Table  # OFFSETS_SCHEMA: the records the probed segments lose
    probed: frozenset[int] = field(default_factory=frozenset)  # the probed segments

    def write_offsets(self) -> pa.Table:
        """The kept winners of the newer segments, then the removed offsets of the probed ones."""
        return pa.concat_tables([self.kept.cast(OFFSETS_SCHEMA), self.removed])

    def probed_segments(self) -> frozenset[int]:
        """The probed segments."""
        return self.probed
