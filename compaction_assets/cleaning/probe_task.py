"""The clean section's side of an incremental cleaning under the offset strategy, segment by segment.

Below the offset its last cleaning reached, a log keeps one visible record per key. Newer records have
higher offsets, and under the offset strategy the highest offset wins, so they supersede exactly the
records of their keys there, whatever else those records hold. A cleaning after a few new records
therefore needs no group-by over that section: each of its segments is read alone (narrow columns),
its records whose keys the new records touch are removed, as are tombstones whose delete horizon has
passed, and the figures of what it keeps (SPEC §4 sizes, timestamps, tombstone horizons) are worked out
from the same read. The new records' own winners come from the usual Spark group-by over their segments.

Like the write (log/segment_task.py), the probe is one function run either in Python workers (a Spark job
over tasks of segments) or in threads of this process (a local master, or little to read). It imports
only pyarrow, numpy, `log/segment_task.py` and `log/arrays.py`, so it is shipped to executors by value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from compaction_assets.log.arrays import from_numpy, from_strings, scalar, to_numpy
from compaction_assets.log.segment_task import visible_mask

COLUMNS = ("offset", "timestamp", "is_tombstone", "record_size", "delete_horizon")   # the key read apart
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63
NUMERIC = ("offset", "ts", "size", "tomb", "horizon", "has_horizon")   # a batch's columns besides the key
RESULT_SCHEMA = "seg_idx int, offset long, figures string"   # a removed offset, or a segment's figures


@dataclass(frozen=True)
class ProbeSpec:
    """One segment of the clean section: its files ((path, file stamp), in offset order), the log start
    and the segment's entries in the deletion vector (ascending numpy array, or None)."""
    seg_idx: int
    files: tuple[tuple[str, int | None], ...]
    min_offset: int
    dead: Any = None
    rows: int = 0                       # rows of its files (the vector's included): what a batch holds


def probe_segments(specs: list[ProbeSpec], touched, now: int, new_horizon: int, fs, batch_rows: int,
                   key_bytes: int) -> list[tuple[int, Any, dict]]:
    """For each segment of `specs`: (seg_idx, removed offsets as a numpy array, figures of the records it
    keeps). `touched` is the keys of the newer records (a pyarrow array), or a function that gives them,
    called once the first keys are read (so the read overlaps whatever produces the keys). The segments'
    keys are read and tested about `key_bytes` at a time, their other columns `batch_rows` rows at a time,
    so memory stays bounded whatever the section's size."""
    out = []
    for group in _runs((_opened(spec, fs) for spec in specs), lambda item: item[2].nbytes, key_bytes):
        touched = touched() if callable(touched) else touched
        out += _probe_group(group, touched, now, new_horizon, batch_rows)
    return out


def _runs(items, size: Callable[[Any], int], limit: int):
    """`items` in consecutive runs, each closed once the sizes of its items reach `limit`."""
    run, total = [], 0
    for item in items:
        run.append(item)
        total += size(item)
        if total >= limit:
            yield run
            run, total = [], 0
    if run:
        yield run


def _opened(spec: ProbeSpec, fs) -> tuple:
    """(spec, its files opened once, in order, as ParquetFile, their keys as one chunked binary array)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(fs.open_input_file(path)) for path, _stamp in spec.files]
    chunks = [chunk for file in files for chunk in file.read(columns=["key"]).column("key").cast(pa.binary()).chunks]
    return spec, files, pa.chunked_array(chunks, pa.binary())


def _probe_group(group: list, touched, now: int, new_horizon: int, batch_rows: int) -> list:
    """`probe_segments` for segments whose keys were read together: one membership test covers them all
    (Arrow builds the test's hash set on every call, 73 ms for 480k keys here, as long as it takes to
    look up a million rows: a test a batch made its cost grow with the section times the new keys)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = pa.chunked_array([chunk for _spec, _files, part in group for chunk in part.chunks], pa.binary())
    superseded = to_numpy(pc.is_in(keys, value_set=touched))
    ends = np.cumsum([len(part) for _spec, _files, part in group])
    members = [(spec, files, superseded[end - len(part):end]) for (spec, files, part), end in zip(group, ends)]
    out = []
    for batch in _runs(members, lambda item: item[0].rows, batch_rows):
        out += _probe_batch(batch, now, new_horizon)
    return out


def _probe_batch(batch: list, now: int, new_horizon: int) -> list[tuple[int, Any, dict]]:
    """`probe_segments` for segments read together: (spec, its opened files, its rows' membership in the
    new keys) each.

    Records below the log start or in the deletion vector are masked, not filtered out, and each column
    is copied once, from its file's chunks into the batch's array: a filter copies every column, and
    memory touched for the first time is what a probe of millions of rows spends most on."""
    import numpy as np
    import pyarrow.compute as pc

    chunks, visible, superseded, ends, rows = {name: [] for name in NUMERIC}, [], [], [], 0
    for spec, files, touched_rows in batch:
        start = rows
        for (_path, stamp), file in zip(spec.files, files):
            table = file.read(columns=list(COLUMNS))
            offsets = to_numpy(table.column("offset"))
            seen = visible_mask(offsets, spec.min_offset, spec.dead)
            tomb = table.column("is_tombstone")
            horizon = table.column("delete_horizon")
            if stamp is not None:   # the file's stamp is the horizon of its tombstones that carry none
                horizon = pc.coalesce(horizon, pc.if_else(tomb, scalar(stamp), scalar(None)))
            chunks["offset"].append(offsets)
            for name, column in (("ts", table.column("timestamp")), ("size", table.column("record_size")),
                                 ("tomb", tomb), ("horizon", pc.fill_null(horizon, scalar(-1))),
                                 ("has_horizon", pc.is_valid(horizon))):
                chunks[name].extend(column.chunks)
            visible.append(seen)
            rows += len(table)
        if rows - start != len(touched_rows):   # its keys were read apart, from the same files
            raise ValueError(f"segment {spec.seg_idx}: its keys and its other columns differ in length")
        superseded.append(touched_rows)
        ends.append(rows)   # a segment's rows follow the previous one's
    if not rows:
        return [(spec.seg_idx, np.zeros(0, np.int64), figures_of(None, new_horizon)) for spec, _, _ in batch]
    columns = {name: _numpy(parts) for name, parts in chunks.items()}
    columns["visible"] = np.concatenate(visible)
    superseded = np.concatenate(superseded) & columns["visible"]
    expired = columns["visible"] & columns["tomb"] & columns["has_horizon"] & (columns["horizon"] <= now)
    columns.update(removed=superseded | expired, expired=expired & ~superseded)
    out = []
    for (spec, _, _), start, end in zip(batch, [0, *ends[:-1]], ends):
        part = {name: values[start:end] for name, values in columns.items()}
        out.append((spec.seg_idx, np.sort(part["offset"][part["removed"]]), figures_of(part, new_horizon)))
    return out


def _numpy(chunks) -> Any:
    """One numpy array of Arrow chunks (or numpy arrays): a copy, made once."""
    import numpy as np

    arrays = [c if isinstance(c, np.ndarray) else to_numpy(c) for c in chunks]
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays) if arrays else np.zeros(0, np.int64)


def figures_of(part: dict | None, new_horizon: int | None) -> dict:
    """The figures of what a segment keeps (as the cleaner's decision reports them per segment), from
    the numpy columns of its records, which of them are visible and which of those are removed."""
    import numpy as np

    empty = {"kept": 0, "kept_bytes": 0, "min_ts": None, "max_ts": None, "first_ts": None, "min_pos_ts": None,
             "tombstones": 0, "stamped": 0, "removed_tomb": 0, "removed_bytes": 0, "removed": 0, "horizons": []}
    if part is None or not part["visible"].any():
        return empty
    kept = part["visible"] & ~part["removed"]
    expired = part["expired"]
    figures = dict(empty, removed=int(part["removed"].sum()), removed_tomb=int(expired.sum()),
                   removed_bytes=int(part["size"].sum(where=expired)))
    if not kept.any():
        return figures
    # reduced under the masks, not copied out of them (each copy is memory touched for the first time)
    ts = part["ts"]
    positive = kept & (ts > 0)
    tombs = kept & part["tomb"]
    bare = tombs & ~part["has_horizon"]    # kept tombstones without a horizon: they get this cleaning's
    horizons = np.where(bare[tombs], new_horizon if new_horizon is not None else -1, part["horizon"][tombs])
    tomb_offsets = part["offset"][tombs]
    groups = []
    for value in np.unique(horizons):
        members = tomb_offsets[horizons == value]
        groups.append((int(value), int(len(members)), int(members.min()), int(members.max())))
    first = int(np.where(kept, part["offset"], INT64_MAX).argmin())   # the kept record of the lowest offset
    figures.update(kept=int(kept.sum()), kept_bytes=int(part["size"].sum(where=kept)),
                   min_ts=int(ts.min(where=kept, initial=INT64_MAX)),
                   max_ts=int(ts.max(where=kept, initial=INT64_MIN)), first_ts=int(ts[first]),
                   min_pos_ts=int(ts.min(where=positive, initial=INT64_MAX)) if positive.any() else None,
                   tombstones=int(tombs.sum()), stamped=int(bare.sum()), horizons=groups)
    return figures


def probe_runner(tasks: list[list[ProbeSpec]], touched, now: int, new_horizon: int, open_fs: Callable[[], Any],
                 batch_rows: int, key_bytes: int):
    """The function for `mapInArrow` over `spark.range(len(tasks))`: task i probes the segments of
    tasks[i] and yields RESULT_SCHEMA rows, a row per removed offset (figures null) and a row of
    figures (JSON, offset null) per segment. `touched` as `probe_segments` takes it (an array when the
    function is shipped to Python workers)."""
    def run(batches):
        import numpy as np
        import pyarrow as pa

        fs = open_fs()
        for batch in batches:
            for task in batch.column(0).to_pylist():
                for seg_idx, removed, figures in probe_segments(tasks[task], touched, now, new_horizon, fs,
                                                                batch_rows, key_bytes):
                    n = len(removed)
                    yield pa.RecordBatch.from_arrays([
                        from_numpy(np.full(n + 1, seg_idx, dtype=np.int32)),
                        from_numpy(np.r_[removed, 0].astype(np.int64), mask=np.r_[np.zeros(n, bool), True]),
                        from_strings([None] * n + [json.dumps(figures)])],
                        names=["seg_idx", "offset", "figures"])
    return run
