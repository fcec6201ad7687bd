"""Per-segment metadata computed from records (what the planner later reads instead of records)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.errors import CorruptLogError
from compaction_assets.segments.arrays import from_numpy, scalar, to_numpy, visible_mask
from compaction_assets.segments.records import SEGMENT_SCHEMA, sizes_array
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


def read_file(
    handle,
    ref: FileRef,
    min_offset: int | None = None,
    dead: pa.Array | None = None,
    columns: tuple[str, ...] | None = None,
) -> pa.Table:
    """One segment file as SEGMENT_SCHEMA (or its `columns`, with offset and is_tombstone among them) with
    the file's stamp applied to tombstones without a horizon, without the records of the deletion vector
    `dead` (ascending, as `dead_offsets` gives it)."""
    schema = SEGMENT_SCHEMA if columns is None else pa.schema([SEGMENT_SCHEMA.field(c) for c in columns])
    try:
        table = handle.st.read_parquet(handle.path(ref.name), columns=list(schema.names), schema=schema)
    except (OSError, pa.ArrowException) as exc:  # named, not "unexpected ArrowInvalid"
        lines = str(exc).strip().splitlines()
        raise CorruptLogError(
            f"log {handle.name!r}: segment file {handle.path(ref.name)} cannot be read "
            f"({(lines[0] if lines else type(exc).__name__)[:300]})"
        ) from None
    table = _visible(table, min_offset, dead)
    if ref.stamp is not None and len(table) and "delete_horizon" in schema.names:
        hz = table.column("delete_horizon")
        fill = pc.if_else(table.column("is_tombstone"), scalar(ref.stamp), scalar(None))
        table = table.set_column(
            table.schema.get_field_index("delete_horizon"), "delete_horizon", pc.coalesce(hz, fill)
        )
    return table


def _visible(table: pa.Table, min_offset: int | None, dead: pa.Array | None) -> pa.Table:
    """`table` without its records below `min_offset` or in `dead`: one filter, and none when every record
    is visible (a filter copies each column, even when it keeps every row: the values of a latest state
    were copied twice more than they needed to be, and first-touched memory is slow on small machines)."""
    if not len(table) or (min_offset is None and (dead is None or not len(dead))):
        return table
    visible = visible_mask(to_numpy(table.column("offset")), min_offset, None if dead is None else to_numpy(dead))
    return table if visible.all() else table.filter(from_numpy(visible))


def read_segment(handle, seg: Segment, min_offset: int | None = None, dead: pa.Array | None = None) -> pa.Table:
    """One segment's visible records as an Arrow table (log start and deletion vector applied)."""
    tables = [read_file(handle, f, min_offset, dead) for f in seg.files]
    return pa.concat_tables(tables) if tables else SEGMENT_SCHEMA.empty_table()


def restat(handle, seg: Segment, min_offset: int, dead: pa.Array | None = None) -> Segment:
    """Recompute a segment's stats over its records at or above `min_offset` (log-start moves)."""
    stats = chunk_stats(read_segment(handle, seg, min_offset, dead))
    return Segment(
        id=new_id(), base_offset=seg.base_offset, next_offset=seg.next_offset, files=seg.files, dead=seg.dead, **stats
    )
