"""Per-segment metadata computed from records (what the planner later reads instead of records); the records
of a segment are read by log/reader.py (`read_segment`, and `restat` for the stats of what a log-start move
leaves)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.segments.arrays import to_numpy
from compaction_assets.segments.records import sizes_array
from compaction_assets.store.manifest import FileRef, Segment, merge_horizons, new_id


def chunk_stats(table: pa.Table) -> dict:
    """Stats of records already in offset order (columns of SEGMENT_SCHEMA, delete_horizon effective)."""
    n = len(table)
    if n == 0:
        return dict(
            records=0, size=0, min_ts=None, max_ts=None, first_ts=None, min_pos_ts=None, tombstones=0, horizons=()
        )
    ts = to_numpy(table.column("timestamp"))
    pos = ts[ts > 0]
    tomb_mask = pc.is_null(table.column("value"))
    tombstones = int(pc.sum(tomb_mask).as_py() or 0)
    horizons: tuple = ()
    if tombstones and "delete_horizon" in table.column_names:
        tombs = table.filter(tomb_mask).filter(pc.is_valid(pc.field("delete_horizon")))
        if len(tombs):
            grouped = tombs.group_by("delete_horizon").aggregate(
                [("offset", "count"), ("offset", "min"), ("offset", "max")]
            )
            horizons = tuple(
                sorted(
                    (int(h), int(c), int(lo), int(hi))
                    for h, c, lo, hi in zip(
                        *(
                            grouped.column(n).to_pylist()
                            for n in ("delete_horizon", "offset_count", "offset_min", "offset_max")
                        )
                    )
                )
            )
    return dict(
        records=n,
        size=int(pc.sum(sizes_array(table)).as_py()),
        min_ts=int(ts.min()),
        max_ts=int(ts.max()),
        first_ts=int(ts[0]),
        min_pos_ts=int(pos.min()) if pos.size else None,
        tombstones=tombstones,
        horizons=horizons,
    )


def add_chunk(seg: Segment, refs: list[FileRef], stats: dict) -> Segment:
    """The segment with more files of records (described together by `stats`) after its existing ones."""
    if stats["records"] == 0:
        return seg

    def lo(a, b):
        return b if a is None else a if b is None else min(a, b)

    def hi(a, b):
        return b if a is None else a if b is None else max(a, b)

    return Segment(
        id=new_id(),
        base_offset=seg.base_offset,
        next_offset=seg.next_offset,
        files=seg.files + tuple(refs),
        records=seg.records + stats["records"],
        size=seg.size + stats["size"],
        min_ts=lo(seg.min_ts, stats["min_ts"]),
        max_ts=hi(seg.max_ts, stats["max_ts"]),
        first_ts=seg.first_ts if seg.records else stats["first_ts"],
        min_pos_ts=lo(seg.min_pos_ts, stats["min_pos_ts"]),
        tombstones=seg.tombstones + stats["tombstones"],
        horizons=merge_horizons(seg.horizons, stats["horizons"]),
        dead=seg.dead,
    )


def combine_stats(first: dict, second: dict) -> dict:
    """Stats of two chunks of records, the second after the first (as `chunk_stats` of both together)."""

    def pick(a, b, f):
        return b if a is None else a if b is None else f(a, b)

    return dict(
        records=first["records"] + second["records"],
        size=first["size"] + second["size"],
        min_ts=pick(first["min_ts"], second["min_ts"], min),
        max_ts=pick(first["max_ts"], second["max_ts"], max),
        first_ts=first["first_ts"] if first["records"] else second["first_ts"],
        min_pos_ts=pick(first["min_pos_ts"], second["min_pos_ts"], min),
        tombstones=first["tombstones"] + second["tombstones"],
        horizons=merge_horizons(first["horizons"], second["horizons"]),
    )
