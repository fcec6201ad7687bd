"""An Avro container file read straight into Arrow by DataFusion's Avro reader (a Rust decoder: no Python
object per record), for the files large enough to repay its import (avro_columns.py decides).

Its columns are cast to the Arrow type avro_columns.arrow_type says for the writer's schema (DataFusion reads
`int` as int32, `float` as float32, an enum as text, and marks fields not null): the same values, so the
same stored bytes as fastavro's records converted (tests/log/test_avro_columns.py pins both). Anything it
cannot read, or whose columns do not cast, is None and the file is read with fastavro.
"""

from __future__ import annotations

import tempfile

import pyarrow as pa


def read_records(data: bytes, typ: pa.StructType) -> pa.StructArray | None:
    """The records of an Avro file's bytes whose schema is a record of type `typ`; None: not read so."""
    import datafusion  # imported only for a large Avro file: its import costs a fraction of a second

    # one partition and no split of the file, so that the rows come in the file's order
    config = datafusion.SessionConfig().with_target_partitions(1).with_repartition_file_scans(False)
    with tempfile.NamedTemporaryFile(suffix=".avro") as copy:  # it reads files, not bytes
        copy.write(data)
        copy.flush()
        try:
            table = datafusion.SessionContext(config).read_avro(copy.name).to_arrow_table()
        except Exception:  # DataFusion raises its own types for any file it cannot read
            return None
    names = [typ.field(i).name for i in range(typ.num_fields)]
    if table.column_names != names:
        return None
    try:
        fields = [typ.field(i) for i in range(typ.num_fields)]
        columns = [table.column(f.name).cast(f.type).combine_chunks() for f in fields]
        records = pa.StructArray.from_arrays(columns, fields=fields) if fields else None
        if records is not None:
            records.validate(full=True)  # text that is not UTF-8: read with fastavro, which refuses it
    except (pa.ArrowException, ValueError):
        return None
    return records
