"""SPEC §7.5: the latest state of a log, per key its winner, written from the log's records.

A cleaning leaves one visible record per key below its first uncleanable offset (recorded in the
manifest's `last_cleaning` as `unique_keys_below`), so the latest state needs no group-by over that clean
section: its records are winners unless a key appears again in the tail above it. Only the tail and the
clean records of the tail's keys are aggregated; the clean section is a scan (no shuffle of the log).

A log whose visible records fit in this process's memory (`fits_in_process`) has its latest state built
here with Arrow (`latest_state_table`), with no Spark job and no JVM to start: the same rule (rank, then
offset; tombstones and remembered deletes drop a key), the same rows. The choice is made by the memory
the build needs against the memory available (cleaning/decide/placement.py), not by a fixed byte count, which
would send large logs that fit here to a Spark job (and a fresh JVM), slower than Arrow in this process.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.cleaning.decide.placement import in_process_memory
from compaction_assets.cleaning.tuning import DEFAULT_TUNING
from compaction_assets.log.reader import dead_offsets, read_segment
from compaction_assets.log.side_tables import remembered_df
from compaction_assets.log.spark_reads import read_segments
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import unique_keys_below
from compaction_assets.segments.offset_map import highest_offsets
from compaction_assets.segments.records import SEGMENT_SCHEMA
from compaction_assets.state.state_parts import write_state_parts, written_by_parts
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

BROADCAST_TAIL_KEYS_MAX = 2_000_000  # tails with up to this many records have their keys broadcast
# what building the state here holds at its peak, per visible logical byte: the records read and the
# winners taken from them (rounded up from the peak measured: docs/performance.md)
HELD_PER_VISIBLE_BYTE = 5
OUTPUT_COLUMNS = ("key", "value", "offset", "timestamp", "headers")
READ_THREADS = 2  # segments read at once (pyarrow releases the GIL as it decodes)


def latest_state_df(spark, handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None):
    """SPEC §7.5: per key, its winner over the whole log; tombstoned keys and keys whose winner loses to
    a remembered delete are absent. Columns: key, value, offset, timestamp, headers."""
    from pyspark.sql import functions as F

    manifest = manifest or handle.manifest()
    strategy = strategy_of(config)
    ranks = strategy.rank_columns
    fields = ("offset", "value", "timestamp", "headers", *ranks)
    payload = F.struct(*fields)
    below = unique_keys_below(manifest)
    segments = list(enumerate(manifest.segments))
    clean_segs = [(i, s) for i, s in segments if below is not None and s.next_offset <= below and s.files]
    if below is None or not clean_segs:
        df = strategy.with_spark_ranks(read_segments(spark, handle, manifest, segments))
        best = df.groupBy("key").agg(F.max_by(payload, strategy.spark_order()).alias("w")).select("key", "w.*")
    else:
        tail_segs = [(i, s) for i, s in segments if s.next_offset > below and s.files]
        clean = strategy.with_spark_ranks(read_segments(spark, handle, manifest, clean_segs)).select("key", *fields)
        if not tail_segs:
            best = clean
        else:
            tail = strategy.with_spark_ranks(read_segments(spark, handle, manifest, tail_segs)).select("key", *fields)
            tail_keys = tail.select("key").distinct()
            if sum(s.records for _, s in tail_segs) <= BROADCAST_TAIL_KEYS_MAX:
                tail_keys = F.broadcast(tail_keys)
            contested = clean.join(tail_keys, "key", "left_semi").unionByName(tail)
            contested = (
                contested.groupBy("key").agg(F.max_by(payload, strategy.spark_order()).alias("w")).select("key", "w.*")
            )
            best = clean.join(tail_keys, "key", "left_anti").unionByName(contested)
    best = best.where(F.col("value").isNotNull())
    rem = remembered_df(spark, handle, manifest) if strategy.needs_guard else None
    if rem is not None:
        best = best.join(rem, "key", "left").where(F.col("m_offset").isNull() | ~strategy.spark_loses("", "m_"))
    return best.select("key", "value", "offset", "timestamp", "headers")


def empty_state() -> pa.Table:
    """A latest state of no rows, in its columns."""
    return SEGMENT_SCHEMA.empty_table().select(list(OUTPUT_COLUMNS))


def fits_in_process(manifest: Manifest, share: float = DEFAULT_TUNING.driver_memory_share) -> bool:
    """True when building the latest state here (HELD_PER_VISIBLE_BYTE times the log's visible bytes)
    takes at most `share` of the memory available, within the budget, as a cleaning's collected results do
    (placement.py's `in_process_memory`)."""
    return HELD_PER_VISIBLE_BYTE * manifest.total_size <= in_process_memory(share)


def parts_fit_in_process(manifest: Manifest, share: float = DEFAULT_TUNING.driver_memory_share) -> bool:
    """`fits_in_process` for a state written file by file (state_parts.py): what it holds is the tail
    and a segment file a thread, not the whole log (a log too large to hold
    whole need not go to a Spark job)."""
    below = unique_keys_below(manifest)
    tail = sum(seg.size for seg in manifest.segments if below is None or seg.next_offset > below)
    largest = max((seg.size for seg in manifest.segments), default=0)
    return HELD_PER_VISIBLE_BYTE * (tail + READ_THREADS * largest) <= in_process_memory(share)


def written_here(
    handle: LogHandle, config: TopicConfig, manifest: Manifest, share: float = DEFAULT_TUNING.driver_memory_share
) -> bool:
    """Whether `write_latest_state` writes this log's state with Arrow in this process (no Spark)."""
    return _by_parts(handle, config, manifest, share) or fits_in_process(manifest, share)


def state_path(
    handle: LogHandle, config: TopicConfig, manifest: Manifest, share: float = DEFAULT_TUNING.driver_memory_share
) -> tuple[str, str]:
    """Which way `write_latest_state` writes this log's state ("in-process" or "spark"), and why, in words."""
    need = (
        f"its state (about {HELD_PER_VISIBLE_BYTE} times its {manifest.total_size / 2**20:.0f} MiB of visible records)"
    )
    room = (
        f"the {in_process_memory(share) / 2**20:.0f} MiB this process may take (a share of the memory "
        "available now, within COMPACTION_MEMORY_BUDGET)"
    )
    if fits_in_process(manifest, share):
        return "in-process", f"{need} fits {room}"
    if _by_parts(handle, config, manifest, share):
        return "in-process", f"{need} is past {room}, but it is written a segment file at a time"
    return "spark", f"{need} is past {room}"


def _by_parts(handle: LogHandle, config: TopicConfig, manifest: Manifest, share: float) -> bool:
    """Whether the state is written file by file (state_parts.py): values without a schema, in memory."""
    return written_by_parts(config, manifest) and parts_fit_in_process(manifest, share) and not has_value_schema(handle)


def latest_state_table(
    handle: LogHandle, config: TopicConfig, manifest: Manifest | None = None, ordered: bool = True
) -> pa.Table:
    """SPEC §7.5 with Arrow in this process (no Spark): the rows of `latest_state_df`, sorted by key (in
    the log's order when not `ordered` and the strategy is the offset's: no sort, the records filtered)."""
    manifest = manifest or handle.manifest()
    dead = dead_offsets(handle, manifest)
    segments = [seg for seg in manifest.segments if seg.files]
    with ThreadPoolExecutor(max_workers=READ_THREADS, thread_name_prefix="state") as pool:
        parts = list(pool.map(lambda seg: read_segment(handle, seg, manifest.log_start_offset, dead), segments))
    table = pa.concat_tables(parts) if parts else SEGMENT_SCHEMA.empty_table()
    strategy = strategy_of(config)
    ranks = strategy.rank_columns
    for name, column in strategy.arrow_ranks(table).items():
        table = table.append_column(name, column)
    table = _state_rows(table, ranks, ordered, unique_keys_below(manifest))
    if strategy.needs_guard and manifest.remembered and len(table):
        rem = handle.st.read_parquet(handle.path(manifest.remembered["file"]))
        rem = rem.select(["key", "m_offset", *[f"m_{c}" for c in ranks]])
        # joined on the key and a row number only (Arrow's join carries no list columns such as headers)
        probe = pa.table(
            {
                "key": table.column("key"),
                "_row": pa.array(np.arange(len(table), dtype=np.int64)),
                **{c: table.column(c) for c in ranks},
            }
        )
        joined = probe.join(rem, keys="key", join_type="inner")
        # a remembered delete drops the key when the record loses to it by rank (SPEC §6)
        loses = pa.array(np.zeros(len(joined), dtype=bool))
        tied = pa.array(np.ones(len(joined), dtype=bool))
        for c in ranks:
            mine, theirs = joined.column(c), joined.column(f"m_{c}")
            loses = pc.or_(loses, pc.and_(tied, pc.less(mine, theirs)))
            tied = pc.and_(tied, pc.equal(mine, theirs))
        keep = np.ones(len(table), dtype=bool)
        keep[pc.filter(joined.column("_row"), pc.fill_null(loses, False)).to_numpy()] = False
        table = table.filter(pa.array(keep))
    return table.select(list(OUTPUT_COLUMNS))


def _state_rows(table: pa.Table, ranks: tuple[str, ...], ordered: bool, below: int | None) -> pa.Table:
    """The rows of `table` that are their key's winner and not a tombstone (in key order when `ordered`).

    Below `below` (the last cleaning's `unique_keys_below`) a key has one visible record: only the tail's
    keys are contested, so only their rows are ranked (after a cleaning of the whole log, none)."""
    contested = _contested(table, below)
    if (ordered or ranks) and contested is None:
        return table.take(_winner_rows(table, ranks))  # in key order
    valid = pc.is_valid(table.column("value")).to_numpy(zero_copy_only=False)
    if contested is not None and (ordered or ranks):
        fight = np.flatnonzero(contested)
        won = fight[_winner_rows(table.take(fight), ranks).to_numpy()]
        rows = np.concatenate([np.flatnonzero(~contested & valid), won])
        if ordered:  # a key once each now: its order is the keys'
            rows = rows[pc.sort_indices(table.column("key").take(rows)).to_numpy()]
        return table.take(rows)
    # the offset strategy's winners kept in place, in the log's order (no sort and no random take of the
    # values)
    if contested is None:
        return table.filter(pc.and_(highest_offsets(table), pa.array(valid)))
    keep = ~contested
    fight = np.flatnonzero(contested)
    if len(fight):
        keep[fight] = highest_offsets(table.take(fight)).to_numpy(zero_copy_only=False)
    return table.filter(pa.array(keep & valid))


def _contested(table: pa.Table, below: int | None) -> np.ndarray | None:
    """Per row, whether its key has rows at or above `below` (None: every key may have several rows)."""
    if below is None:
        return None
    tail = pc.greater_equal(table.column("offset"), below)
    if not pc.any(tail).as_py():
        return np.zeros(len(table), dtype=bool)
    tail_keys = pc.unique(table.column("key").filter(tail))
    return pc.or_(tail, pc.is_in(table.column("key"), value_set=tail_keys)).to_numpy(zero_copy_only=False)


def _winner_rows(table: pa.Table, ranks: tuple[str, ...]) -> pa.Array:
    """The rows of `table` that are their key's winner and not a tombstone, in key order.

    Each key's winner is its greatest (rank, offset): in that order, its key's last row. Only the order
    and the keys are sorted, and the records taken once, the winners' rows only (sorting the whole table,
    then filtering it, copied every record twice)."""
    order = pc.sort_indices(
        table.select(["key", *ranks, "offset"]),
        sort_keys=[("key", "ascending"), *[(c, "ascending") for c in ranks], ("offset", "ascending")],
    )
    n = len(order)
    if not n:
        return order
    keys = table.column("key").take(order)
    last = np.ones(n, dtype=bool)
    last[:-1] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    alive = pc.is_valid(table.column("value")).take(order).to_numpy(zero_copy_only=False)
    return order.filter(pa.array(last & alive))


def write_latest_state(
    handle: LogHandle,
    config: TopicConfig,
    st,
    target: str,
    spark,
    manifest: Manifest | None = None,
    state: pa.Table | None = None,
    share: float = DEFAULT_TUNING.driver_memory_share,
) -> int:
    """Write the latest state as Parquet into the folder `target` of storage `st` (replacing it); the
    rows written. A log `written_here` (within `share` of the memory available) is written with Arrow
    and never calls `spark` (a function returning the session, so that no JVM starts for it); `state`,
    its `latest_state_table` when the caller built it already. The offset strategy's state of a cleaned
    log is written file by file (state_parts.py), unless its values are structured (their columns' types
    are worked out over the whole state)."""
    manifest = manifest or handle.manifest()
    if state is None and _by_parts(handle, config, manifest, share):
        st.delete(target)  # replaced, as Spark's overwrite does
        st.makedirs(target)
        return write_state_parts(handle, manifest, st, target, OUTPUT_COLUMNS, READ_THREADS)
    # a state built already is written as it is: asking the memory again, now that the state holds some
    # of it, could send the log to Spark and build it a second time
    if state is not None or fits_in_process(manifest, share):
        # the files need no key order (Spark's writes have none): the offset strategy's state is not sorted
        table = with_value_columns(
            handle, state if state is not None else latest_state_table(handle, config, manifest, ordered=False)
        )
        st.delete(target)  # replaced, as Spark's overwrite does
        st.makedirs(target)
        st.write_parquet(f"{target.rstrip('/')}/part-00000.parquet", table, compression="snappy")
        return len(table)
    df = with_value_columns_df(handle, latest_state_df(spark(), handle, config, manifest))
    df.write.mode("overwrite").parquet(st.spark_uri(target))
    # the rows from the written files' footers, not from another Spark job reading them back
    import pyarrow.parquet as pq

    return sum(
        pq.ParquetFile(st.fs.open_input_file(f"{target.rstrip('/')}/{name}")).metadata.num_rows
        for name in st.list_dir(target)
        if name.endswith(".parquet") and not name.startswith((".", "_"))
    )


# --- structured values as columns (values landed from a connector with a schema) ------------------------


def _column_names(schema: pa.Schema) -> list[tuple[str, str]]:
    """(field, column) per value field; a field named like a record column is prefixed `value_`."""
    return [(f.name, f"value_{f.name}" if f.name in OUTPUT_COLUMNS else f.name) for f in schema]


def _parse_values(lines: list[bytes], schema: pa.Schema) -> pa.Table:
    """Canonical JSON objects to a table of `schema`; a field whose rows do not fit its type is JSON text."""
    import io
    import json

    import pyarrow.json as pajson

    try:
        return pajson.read_json(
            io.BytesIO(b"\n".join(lines)),
            parse_options=pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except pa.ArrowInvalid:
        rows = [json.loads(line) for line in lines]
    cols = {}
    for f in schema:
        vals = [r.get(f.name) for r in rows]
        try:
            cols[f.name] = pa.array(vals, f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            cols[f.name] = pa.array(
                [
                    v if v is None or isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))
                    for v in vals
                ],
                pa.string(),
            )
    return pa.table(cols)


def has_value_schema(handle: LogHandle) -> bool:
    """Whether the log's values are structured (a value schema with fields: the state gets their columns)."""
    from compaction_assets.ingest.formats.canonical import SCHEMA_FILE, read_schema

    vs = read_schema(handle.st, handle.path(SCHEMA_FILE))
    return vs is not None and bool(len(vs.schema))


def with_value_columns(handle: LogHandle, table: pa.Table) -> pa.Table:
    """The latest state with each field of its structured values as a column (when the log has a value
    schema, see ingest/formats/canonical.py); values that are not JSON objects leave them null."""
    from compaction_assets.ingest.formats.canonical import SCHEMA_FILE, read_schema

    vs = read_schema(handle.st, handle.path(SCHEMA_FILE))
    if vs is None or not len(vs.schema):
        return table
    values = table.column("value").to_pylist()
    rows = [i for i, v in enumerate(values) if v is not None and v[:1] == b"{"]
    positions = np.full(len(values), -1, dtype=np.int64)
    positions[rows] = np.arange(len(rows))
    parsed = _parse_values([values[i] for i in rows], vs.schema) if rows else vs.schema.empty_table()
    index = pa.array(positions, mask=positions < 0)
    for field, column in _column_names(vs.schema):
        table = table.append_column(
            column, parsed.column(field).take(index) if rows else pa.nulls(len(table), vs.schema.field(field).type)
        )
    return table


def with_value_columns_df(handle: LogHandle, df):
    """`with_value_columns` for a Spark DataFrame of the latest state (from_json on the value)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StringType, StructField, StructType

    from compaction_assets.ingest.formats.canonical import SCHEMA_FILE, read_schema

    vs = read_schema(handle.st, handle.path(SCHEMA_FILE))
    if vs is None or not len(vs.schema):
        return df

    def spark_type(t: pa.DataType):
        try:
            return StringType() if pa.types.is_null(t) else from_arrow_type(t)
        except TypeError:
            return StringType()

    schema = StructType([StructField(f.name, spark_type(f.type)) for f in vs.schema])
    parsed = F.from_json(F.col("value").cast("string"), schema)
    return df.select("*", *[parsed[field].alias(column) for field, column in _column_names(vs.schema)])
