"""The other engines' way of bringing a table of a log's latest state up to date after a change, for
bench/table_contenders.py, with no product code: each builds its table of the state (untimed, in the
bench's process) and, timed in a process of its own, applies a landing file's change to it:

- `delta`: delta-rs (`deltalake`) MERGEs the change's winners (the last record of each key; a tombstone
  deletes) into a Delta table;
- `iceberg`: pyiceberg's `upsert` of the winners, then `delete` of the tombstoned keys, on a plain Iceberg
  table in a SQLite catalog of its own;
- `duckdb`: DuckDB recomputes the whole state from the log's segment files and the change, as Parquet.

`python -m bench.table_merges KIND SPEC.json` runs one (SPEC: a `MergeSpec` as JSON).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# The state's columns in every contender's table (the product's table adds `partition` and `headers`,
# constant here: one partition, no headers).
STATE_COLUMNS = ("key", "value", "offset", "timestamp")
ICEBERG_TABLE = "bench.state"


@dataclass(frozen=True)
class MergeSpec:
    """What one contender's run is given: its table, the change and the offset of its first record (the
    log's end offset before it); for DuckDB the log's segment files and the Parquet file to write."""

    table: str
    change: str
    first_offset: int
    segment_files: tuple[str, ...] = ()

    def write(self, path: str) -> str:
        with open(path, "w") as fh:
            json.dump(asdict(self), fh)
        return path

    @classmethod
    def read(cls, path: str) -> MergeSpec:
        with open(path) as fh:
            data = json.load(fh)
        return cls(**{**data, "segment_files": tuple(data["segment_files"])})


def winners(change: pa.Table, first_offset: int) -> pa.Table:
    """The change's last record of each key, with its offset (a null value: the key's tombstone)."""
    change = change.append_column("offset", pa.array(range(first_offset, first_offset + len(change)), pa.int64()))
    last = change.group_by("key").aggregate([("offset", "max")]).column("offset_max")
    rows = pc.subtract(last, pa.scalar(first_offset, pa.int64()))
    return change.take(rows).select(list(STATE_COLUMNS))


def _state_schema(state: pa.Table) -> pa.Schema:
    """The state's schema with `key` required (Iceberg's identifier field; Delta's merge key)."""
    return pa.schema([f.with_nullable(f.name != "key") for f in state.select(list(STATE_COLUMNS)).schema])


def build_delta(state: pa.Table, path: str) -> None:
    from deltalake import write_deltalake

    write_deltalake(path, state.select(list(STATE_COLUMNS)).cast(_state_schema(state)))


def _iceberg_catalog(folder: str):
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("bench", uri=f"sqlite:///{folder}/catalog.db", warehouse=f"file://{folder}/warehouse")


def build_iceberg(state: pa.Table, folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    catalog = _iceberg_catalog(folder)
    catalog.create_namespace("bench")
    table = catalog.create_table(ICEBERG_TABLE, schema=_state_schema(state))
    table.append(state.select(list(STATE_COLUMNS)).cast(_state_schema(state)))


def read_delta(path: str) -> pa.Table:
    from deltalake import DeltaTable

    return pa.table(DeltaTable(path).to_pyarrow_table())


def read_iceberg(folder: str) -> pa.Table:
    return _iceberg_catalog(folder).load_table(ICEBERG_TABLE).scan().to_arrow()


def merge_delta(spec: MergeSpec) -> None:
    from deltalake import DeltaTable

    source = winners(pq.read_table(spec.change), spec.first_offset)
    (
        DeltaTable(spec.table)
        .merge(source, predicate="t.key = s.key", source_alias="s", target_alias="t")
        # the first clause that matches applies: a tombstone deletes, before any update
        .when_matched_delete(predicate="s.value IS NULL")
        .when_matched_update_all(predicate="s.value IS NOT NULL")
        .when_not_matched_insert_all(predicate="s.value IS NOT NULL")
        .execute()
    )


def merge_iceberg(spec: MergeSpec) -> None:
    from pyiceberg.expressions import In

    source = winners(pq.read_table(spec.change), spec.first_offset)
    tombstone = source.column("value").is_null()
    table = _iceberg_catalog(spec.table).load_table(ICEBERG_TABLE)
    table.upsert(source.filter(pc.invert(tombstone)).cast(_state_schema(source)), join_cols=["key"])
    deleted = source.filter(tombstone).column("key").to_pylist()
    if deleted:
        table.delete(In("key", deleted))


def recompute_duckdb(spec: MergeSpec) -> None:
    import duckdb

    def quoted(path: str) -> str:
        return "'" + path.replace("'", "''") + "'"

    segments = "[" + ", ".join(quoted(p) for p in spec.segment_files) + "]"
    records = f"""SELECT key, value, "offset", timestamp FROM read_parquet({segments})
        UNION ALL
        SELECT key, value, {int(spec.first_offset)} + file_row_number, timestamp
        FROM read_parquet({quoted(spec.change)}, file_row_number = true)"""
    latest = f"""SELECT * FROM ({records}) QUALIFY row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1"""
    duckdb.sql(f"COPY (SELECT * FROM ({latest}) WHERE value IS NOT NULL) TO {quoted(spec.table)} (FORMAT PARQUET)")


CONTENDERS = {"delta": merge_delta, "iceberg": merge_iceberg, "duckdb": recompute_duckdb}


if __name__ == "__main__":
    CONTENDERS[sys.argv[1]](MergeSpec.read(sys.argv[2]))
