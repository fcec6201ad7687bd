"""A topic table's columns: the latest state's, with the log's partition, as Iceberg sees them.

`key`, `value`, the value's fields where the log's values are structured (the columns `write_latest_state`
adds: landed from a connector with a schema), then `partition`, `offset`, `timestamp`,
`headers`. The raw `value` stays beside the fields, so a value that is not an object is not lost. The
identifier fields are (partition, key); the table is partitioned by `partition` and a bucket of `key`,
so a change to a few keys rewrites the few files of their buckets.

The product owns the schema: the table property `compaction.schema-id` records the schema it last
committed, and a table whose current schema is another was changed by someone else (refused).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from compaction_assets.errors import first_line
from compaction_assets.segments.records import HEADER_TYPE
from compaction_assets.state.latest_state import with_value_columns
from compaction_assets.store.log_store import LogHandle
from compaction_assets.table.catalog import TableError

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table, Transaction

SCHEMA_ID_PROPERTY = "compaction.schema-id"
IDENTIFIER_FIELDS = ("partition", "key")
RECORD_FIELDS = [pa.field("key", pa.binary(), nullable=False), pa.field("value", pa.binary())]
TRAILING_FIELDS = [
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("headers", pa.list_(HEADER_TYPE)),
]
FIXED = {f.name for f in RECORD_FIELDS + TRAILING_FIELDS}
STATE_COLUMNS = 5  # a latest state's own columns (key, value, offset, timestamp, headers) before its value's fields


def _iceberg_type(t: pa.DataType) -> pa.DataType:
    """A value field's Arrow type as Iceberg can hold it (no null type; timestamps in microseconds)."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def table_rows(handle: LogHandle, state: pa.Table, partition: int) -> pa.Table:
    """Rows of the log's latest state (`latest_state_table`'s, or some of them) as table rows, in the
    table's column order: the value's fields added where the log's values are structured."""
    return shaped_rows(with_value_columns(handle, state), len(state.column_names), partition)


def shaped_rows(state: pa.Table, base: int, partition: int) -> pa.Table:
    """Rows of a latest state whose columns past the first `base` are its value's fields as table rows of log
    partition `partition` (Spark's workers shape theirs with it too: table/commit/spark_tasks.py)."""
    columns = {f.name: state.column(f.name).cast(f.type) for f in RECORD_FIELDS}
    for i in range(base, len(state.column_names)):  # a value field `partition` is `value_partition`, as
        name, column = state.column_names[i], state.column(i)  # fields named like the others are prefixed
        columns["value_partition" if name == "partition" else name] = column.cast(_iceberg_type(column.type))
    columns["partition"] = pa.array(np.full(len(state), partition, dtype=np.int32))
    for f in TRAILING_FIELDS[1:]:
        columns[f.name] = state.column(f.name).cast(f.type)
    schema = pa.schema(
        [*RECORD_FIELDS, *[pa.field(n, columns[n].type) for n in columns if n not in FIXED], *TRAILING_FIELDS]
    )
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


def new_table_layout(schema: pa.Schema, buckets: int) -> tuple[Schema, PartitionSpec]:
    """The Iceberg schema (identifier fields set) and partition spec of a new table for rows of `schema`."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema, assign_fresh_schema_ids
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    from compaction_assets.table.iceberg_internals import iceberg_schema

    converted = assign_fresh_schema_ids(iceberg_schema(schema))
    ids = [converted.find_field(name).field_id for name in IDENTIFIER_FIELDS]
    iceberg = Schema(*converted.fields, identifier_field_ids=ids)
    spec = PartitionSpec(
        PartitionField(source_id=ids[0], field_id=1000, transform=IdentityTransform(), name="partition"),
        PartitionField(source_id=ids[1], field_id=1001, transform=BucketTransform(buckets), name="key_bucket"),
    )
    return iceberg, spec


def partitions_filter(partitions: Iterable[int]) -> BooleanExpression:
    """The row filter of a scan of the log partitions `partitions` (an equality for one, nothing for none)."""
    from pyiceberg.expressions import In, Reference
    from pyiceberg.expressions.literals import literal

    return In(term=Reference("partition"), values={literal(p) for p in partitions})


def check_owned(table: Table, ident: str) -> None:
    """Refuse a table whose schema someone else changed since the product last committed one."""
    recorded = table.properties.get(SCHEMA_ID_PROPERTY)
    current = table.metadata.current_schema_id
    if recorded is None or int(recorded) != current:
        raise TableError(
            f"table {ident}: its schema was changed outside the product (schema id {current}, "
            f"the product last wrote {recorded}); restore it, or drop the table to rebuild it "
            "from the logs"
        )


def conform(tx: Transaction, rows: pa.Table, ident: str) -> pa.Table:
    """`rows` in the schema of the table of transaction `tx`: new value fields added to the table (its
    schema evolved and recorded), fields the rows lack as nulls; a type change is refused."""
    current = tx.table_metadata.schema().as_arrow()
    new = [f for f in rows.schema if f.name not in current.names]
    if new:
        try:
            with tx.update_schema() as update:
                update.union_by_name(pa.schema(new))
        except Exception as exc:
            raise TableError(
                f"table {ident}: cannot add value fields {[f.name for f in new]}: {first_line(exc, None)}"
            ) from None
        tx.set_properties({SCHEMA_ID_PROPERTY: str(tx.table_metadata.current_schema_id)})
        current = tx.table_metadata.schema().as_arrow()
    arrays = []
    for f in current:
        if f.name not in rows.column_names:
            arrays.append(pa.nulls(len(rows), f.type))
            continue
        try:
            arrays.append(rows.column(f.name).cast(f.type))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            raise TableError(
                f"table {ident}: column {f.name!r} is {f.type} in the table but {rows.schema.field(f.name).type} "
                "in this log's values; the product cannot change a column's type"
            ) from None
    return pa.Table.from_arrays(arrays, schema=current)
