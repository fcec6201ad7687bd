"""The clean section's side of an incremental cleaning under the offset strategy, segment by segment.

Below the offset its last cleaning reached, a log keeps one visible record per key. Newer records have
higher offsets, and under the offset strategy the highest offset wins, so they supersede exactly the
records of their keys there, whatever else those records hold. A cleaning after a few new records
therefore needs no group-by over that section: each of its segments is read alone (narrow columns),
its records whose keys the new records touch are removed, as are tombstones whose delete horizon has
passed, and the figures of what it keeps (SPEC §4 sizes, timestamps, tombstone horizons) are worked out
from the same read. The new records' own winners come from the usual Spark group-by over their segments.

Like the write (segments/segment_task.py), the probe is one function run either in Python workers (a Spark job
over tasks of segments) or in threads of this process (a local master, or little to read). It imports
only pyarrow, numpy and segments' `arrays` and `offset_map`, so it is shipped to executors
by value with them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from compaction_assets.segments.arrays import from_numpy, from_strings, scalar, to_numpy, visible_mask
from compaction_assets.segments.offset_map import KeySet, hashed

COLUMNS = ("key", "offset", "timestamp", "is_tombstone", "record_size", "delete_horizon")  # what is read
INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)
RESULT_SCHEMA = "seg_idx int, offset long, figures string"  # a removed offset, or a segment's figures


@dataclass(frozen=True)
class ProbeSpec:
    """One segment of the clean section: its files ((path, file stamp), in offset order), the log start
    and the segment's entries in the deletion vector (ascending numpy array, or None)."""

    seg_idx: int
    files: tuple[tuple[str, int | None], ...]
    min_offset: int
    dead: Any = None
    rows: int = 0  # rows of its files (the vector's included)


def probe_segments(
    specs: Iterable[ProbeSpec], keys, now: int, new_horizon: int, fs, batch_rows: int, read_ahead_rows: int = 0
) -> list[tuple[int, Any, dict]]:
    """For each segment of `specs` (a list, or an iterable that threads take segments from as they get
    free): (seg_idx, removed offsets as a numpy array, figures of the records it keeps). `keys` gives the
    newer records' KeySet (`get()`) and tells whether it can be had at once (`ready()`); until it can, up
    to `read_ahead_rows` rows are read, hashed and held, so the read overlaps whatever produces the keys.
    The files are read and tested `batch_rows` rows at a time, all columns at once, so memory stays a
    batch's (and the rows read ahead) whatever the section's size (and a batch's arrays stay in the cores'
    caches: memory touched for the first time is what a probe of millions of rows spent most on when it
    held its keys and columns whole)."""
    import pyarrow.parquet as pq

    tallies: list[tuple[ProbeSpec, FigureTally]] = []
    held: list[tuple[FigureTally, dict]] = []  # batches read before the keys are tested
    held_rows, key_set = 0, None
    for spec in specs:
        tally = FigureTally(new_horizon)
        tallies.append((spec, tally))
        for path, stamp in spec.files:
            file = pq.ParquetFile(fs.open_input_file(path))
            for batch in file.iter_batches(batch_size=batch_rows, columns=list(COLUMNS), use_threads=False):
                held.append((tally, _read(batch, spec, stamp, now)))
                held_rows += batch.num_rows
                if key_set is None and held_rows < read_ahead_rows and not keys.ready():
                    continue
                key_set = key_set or keys.get()
                _tested(held, key_set)
                held_rows = 0
    if held:
        _tested(held, key_set or keys.get())
    return [(spec.seg_idx, tally.removed_offsets(), tally.figures()) for spec, tally in tallies]


def _read(batch, spec: ProbeSpec, stamp: int | None, now: int) -> dict:
    """A batch of a segment's file as numpy columns, with which of its rows are visible and which are
    tombstones whose delete horizon has passed, and its keys hashed (all the probe needs but the keys)."""
    import pyarrow.compute as pc

    offsets = to_numpy(batch.column("offset"))
    visible = visible_mask(offsets, spec.min_offset, spec.dead)
    tomb = batch.column("is_tombstone")
    horizon = batch.column("delete_horizon")
    if stamp is not None:  # the file's stamp is the horizon of its tombstones that carry none
        horizon = pc.coalesce(horizon, pc.if_else(tomb, scalar(stamp), scalar(None)))
    part = {
        "offset": offsets,
        "ts": to_numpy(batch.column("timestamp")),
        "size": to_numpy(batch.column("record_size")),
        "tomb": to_numpy(tomb),
        "horizon": to_numpy(pc.fill_null(horizon, scalar(-1))),
        "has_horizon": to_numpy(pc.is_valid(horizon)),
        "visible": visible,
        "keys": hashed(batch.column("key")),
    }
    part["expired"] = visible & part["tomb"] & part["has_horizon"] & (part["horizon"] <= now)
    return part


def _tested(held: list[tuple[FigureTally, dict]], key_set: KeySet) -> None:
    """Test the held batches' keys against the newer records' (a row they supersede is removed, as is
    an expired tombstone), count each batch into its segment's tally and let the batches go."""
    for tally, part in held:
        superseded = key_set.contains_hashed(part["keys"]) & part["visible"]
        expired = part["expired"]
        part.update(removed=superseded | expired, expired=expired & ~superseded)
        tally.add(part)
    held.clear()


class FigureTally:
    """The figures of what a segment keeps (as the cleaner's decision reports them per segment), summed
    over the batches of its records as they are probed."""

    def __init__(self, new_horizon: int | None):
        self.new_horizon = -1 if new_horizon is None else new_horizon
        self.removed = self.removed_tomb = self.removed_bytes = 0
        self.kept = self.kept_bytes = self.tombstones = self.stamped = 0
        self.min_ts, self.max_ts, self.min_pos_ts = INT64_MAX, INT64_MIN, INT64_MAX
        # (offset, timestamp) of the kept record of the lowest offset
        self.first: tuple[int, int | None] = (INT64_MAX, None)
        self.horizons: dict[int, tuple[int, int, int]] = {}  # value: (tombstones, lowest, highest offset)
        self.removed_parts: list = []

    def add(self, part: dict) -> None:
        """Count a batch (`_read`'s columns, tested). Reduced over np.where's arrays, not under `where=` masks
        (numpy's masked reductions cost more than np.where and a plain reduction together)."""
        import numpy as np

        removed, expired = part["removed"], part["expired"]
        self.removed_parts.append(part["offset"][removed])
        self.removed += int(np.count_nonzero(removed))
        expired_count = int(np.count_nonzero(expired))
        if expired_count:
            self.removed_tomb += expired_count
            self.removed_bytes += int(part["size"][expired].sum())
        kept = part["visible"] & ~removed
        count = int(np.count_nonzero(kept))
        if not count:
            return
        ts, offsets = part["ts"], part["offset"]
        self.kept += count
        self.kept_bytes += int(np.where(kept, part["size"], 0).sum())
        self.min_ts = min(self.min_ts, int(np.where(kept, ts, INT64_MAX).min()))
        self.max_ts = max(self.max_ts, int(np.where(kept, ts, INT64_MIN).max()))
        self.min_pos_ts = min(self.min_pos_ts, int(np.where(kept & (ts > 0), ts, INT64_MAX).min()))
        first = int(np.where(kept, offsets, INT64_MAX).argmin())
        self.first = min(self.first, (int(offsets[first]), int(ts[first])))
        tombs = kept & part["tomb"]
        if not tombs.any():
            return
        bare = tombs & ~part["has_horizon"]  # kept tombstones without a horizon: they get this cleaning's
        self.tombstones += int(np.count_nonzero(tombs))
        self.stamped += int(np.count_nonzero(bare))
        self._add_horizons(np.where(bare[tombs], self.new_horizon, part["horizon"][tombs]), offsets[tombs])

    def _add_horizons(self, horizons, offsets) -> None:
        """Group kept tombstones by horizon: (count, lowest, highest offset) a horizon."""
        import numpy as np

        # the distinct horizons, as np.unique finds them (whose first call imports numpy.ma)
        ordered = np.sort(horizons)
        for value in ordered[np.r_[True, ordered[1:] != ordered[:-1]]]:
            members = offsets[horizons == value]
            count, low, high = self.horizons.get(int(value), (0, INT64_MAX, INT64_MIN))
            self.horizons[int(value)] = (
                count + len(members),
                min(low, int(members.min())),
                max(high, int(members.max())),
            )

    def removed_offsets(self) -> Any:
        """The offsets removed, ascending."""
        import numpy as np

        return np.sort(np.concatenate(self.removed_parts)) if self.removed_parts else np.zeros(0, np.int64)

    def figures(self) -> dict:
        """The figures, as JSON-able numbers (None where no record is kept)."""
        kept = bool(self.kept)
        return {
            "kept": self.kept,
            "kept_bytes": self.kept_bytes,
            "min_ts": self.min_ts if kept else None,
            "max_ts": self.max_ts if kept else None,
            "first_ts": self.first[1],
            "min_pos_ts": self.min_pos_ts if self.min_pos_ts != INT64_MAX else None,
            "tombstones": self.tombstones,
            "stamped": self.stamped,
            "removed_tomb": self.removed_tomb,
            "removed_bytes": self.removed_bytes,
            "removed": self.removed,
            "horizons": [(value, *group) for value, group in sorted(self.horizons.items())],
        }


class KeysWhenAsked:
    """A Spark worker's key set: built from the newer records' keys when first asked, and ready at once
    (a worker has nothing to read ahead for)."""

    def __init__(self, keys):
        self.keys, self.key_set = keys, None

    def ready(self) -> bool:
        """Always: the set is built when asked."""
        return True

    def get(self) -> KeySet:
        """The set, built on the first call."""
        if self.key_set is None:
            self.key_set = KeySet(self.keys)
        return self.key_set


def probe_runner(
    tasks: list[list[ProbeSpec]], keys, now: int, new_horizon: int, open_fs: Callable[[], Any], batch_rows: int
):
    """The function for `mapInArrow` over `spark.range(len(tasks))`: task i probes the segments of
    tasks[i] and yields RESULT_SCHEMA rows, a row per removed offset (figures null) and a row of
    figures (JSON, offset null) per segment. `keys`: the newer records' keys, an Arrow array (a worker
    builds one set for the tasks it runs)."""

    def run(batches):
        import numpy as np
        import pyarrow as pa

        fs = open_fs()
        key_set = KeysWhenAsked(keys)
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for seg_idx, removed, figures in probe_segments(tasks[task], key_set, now, new_horizon, fs, batch_rows):
                    n = len(removed)
                    yield pa.RecordBatch.from_arrays(
                        [
                            from_numpy(np.full(n + 1, seg_idx, dtype=np.int32)),
                            from_numpy(np.r_[removed, 0].astype(np.int64), mask=np.r_[np.zeros(n, bool), True]),
                            from_strings([None] * n + [json.dumps(figures)]),
                        ],
                        names=["seg_idx", "offset", "figures"],
                    )

    return run
