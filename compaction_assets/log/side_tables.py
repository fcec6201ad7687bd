"""The log's side tables (SPEC §6 guard, deletion vector): one naming scheme, one way to read and write each.

  side/remembered-<id>/   remembered deletes: the keys of removed tombstones with their rank and expiry
  side/tombstones-<id>/   the tombstone index: kept tombstones with their horizon (appends read it)
  side/deleted-<id>/      a part of the deletion vector: offsets removed from files a cleaning kept
The manifest names the current ones (`remembered`, `tombstone_index`, `deleted`) and a new one's folder
(`store/manifest.side_table_name`); the cleaner and the engine write new ones through here, so a table has
one writer whatever layer asks.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.log.spark_reads import side_table_df
from compaction_assets.log.writer import write_df
from compaction_assets.segments.segment_task import DEAD_PART_OPTIONS
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest, Segment, side_table_name


def remembered_df(spark, handle: LogHandle, manifest: Manifest):
    """The log's remembered deletes (SPEC §6) as a DataFrame, or None when there are none."""
    if not manifest.remembered:
        return None
    return side_table_df(spark, handle, manifest.remembered["file"])


def write_remembered(handle: LogHandle, rows) -> dict[str, Any]:
    """Remembered deletes (a pyarrow table, or a cleaning's Spark DataFrame) as a new side table; the
    manifest's entry for it."""
    name = side_table_name("remembered")
    if isinstance(rows, pa.Table):
        handle.st.write_parquet(handle.path(f"{name}/part-0.parquet"), rows)
        return {"file": name, "count": len(rows), "min_expiry": int(pc.min(rows.column("m_expiry")).as_py())}
    write_df(handle, rows.coalesce(1), name)
    # the figures from the written file itself (one small file, read here), not from another Spark job
    count, min_expiry = _count_and_min(handle, name, "m_expiry")
    return {"file": name, "count": count, "min_expiry": min_expiry}


def expire_remembered(handle: LogHandle, remembered: dict[str, Any], now: int) -> dict[str, Any] | None:
    """The remembered deletes without those expired at `now`, as a new table (the planner's evaluation
    says when some have: `Evaluation.remembered_expired`)."""
    table = handle.st.read_parquet(handle.path(remembered["file"]))
    table = table.filter(pc.greater(table.column("m_expiry"), now))
    return write_remembered(handle, table) if len(table) else None


def write_tombstone_index(handle: LogHandle, rows, count: int) -> dict[str, Any]:
    """A cleaning's kept tombstones (Spark DataFrame: key, offset, horizon, rank columns) as the new
    tombstone index; the manifest's entry for it."""
    name = side_table_name("tombstones")
    write_df(handle, rows.coalesce(1), name)
    return {"file": name, "count": count}


def write_vector_part(handle: LogHandle, folder: str, offsets: np.ndarray) -> None:
    """Ascending offsets as one part of a deletion vector folder (written on the driver)."""
    handle.st.write_parquet(
        handle.path(f"{folder}/part-{uuid.uuid4().hex}.parquet"), pa.table({"offset": offsets}), **DEAD_PART_OPTIONS
    )


def vector_entries(vector: np.ndarray | None, seg: Segment) -> np.ndarray | None:
    """The entries of `seg` in a deletion vector (numpy, ascending, or None): a slice, or None."""
    if vector is None:
        return None
    lo, hi = np.searchsorted(vector, [seg.base_offset, seg.next_offset])
    return vector[lo:hi] if hi > lo else None


def _count_and_min(handle: LogHandle, folder: str, column: str) -> tuple[int, int]:
    """Rows and the minimum of `column` over the Parquet files written into `folder` (any store)."""
    st = handle.st
    count, low = 0, None
    for entry in st.list_dir(handle.path(folder)):
        if entry.endswith(".parquet") and not entry.startswith((".", "_")):
            col = st.read_parquet(handle.path(f"{folder}/{entry}"), columns=[column]).column(column)
            count += len(col)
            if len(col):
                least = pc.min(col).as_py()
                low = least if low is None else min(low, least)
    return count, int(low) if low is not None else 0
