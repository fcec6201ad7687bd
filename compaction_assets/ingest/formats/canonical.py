"""Keys and values as the log stores them: bytes stay bytes, text is UTF-8, structured data canonical JSON.

A structured key or value (an Avro record, a Parquet struct, a JSON object, an array, a number, a
boolean) is stored as canonical JSON: keys sorted, compact separators, UTF-8, so that the same primary key
written by two files (or two formats) is the same bytes and compares equal. Inside it, bytes are base64
text, timestamps and dates ISO-8601 text, decimals their exact decimal text, UUIDs their text.

The fields of structured values are recorded per log (`value_schema.json` beside its manifest) as an
Arrow schema inferred from the canonical JSON itself, so that the latest state can show them as columns.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import functools
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from compaction_assets.errors import InvalidInputError
from compaction_assets.segments.records import to_bytes

SCHEMA_FILE = "value_schema.json"


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(obj)).decode("ascii")
    if isinstance(obj, (dt.datetime, dt.date, dt.time)):
        return obj.isoformat()
    if isinstance(obj, (decimal.Decimal, uuid.UUID)):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} cannot be written as JSON")


_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default, allow_nan=False
)  # built once: json.dumps with options builds one per call


def canonical_json(obj: Any) -> bytes:
    """The canonical JSON bytes of a structured object (sorted keys, compact, UTF-8)."""
    return _ENCODER.encode(obj).encode("utf-8")


def is_structured(obj: Any) -> bool:
    """True for what is stored as canonical JSON (not bytes, text or null)."""
    return not (obj is None or isinstance(obj, (bytes, bytearray, memoryview, str)))


def encode(obj: Any, where: str) -> bytes | None:
    """A key or value as stored: None, bytes, UTF-8 text, or canonical JSON; one-line error naming `where`."""
    if obj is None or isinstance(obj, (bytes, bytearray, memoryview, str)):
        return to_bytes(obj, where)  # bytes stay bytes, text is its UTF-8, as a native record's
    try:
        return canonical_json(obj)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(f"{where}: cannot be stored as canonical JSON ({exc})") from None


# --- the value schema kept per log -----------------------------------------------------------------------


@dataclass(frozen=True)
class ValueSchema:
    """The fields of a log's structured values (Arrow), merged over every file ingested."""

    schema: pa.Schema

    def to_json(self) -> bytes:
        """The side file's content."""
        data = base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii")
        return json.dumps(
            {"format": "arrow-ipc-schema", "fields": self.schema.names, "schema": data}, indent=1
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes, where: str) -> ValueSchema:
        """Read the side file back; a one-line error naming it when it does not."""
        try:
            data = json.loads(raw)
            schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"])))
        except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            raise InvalidInputError(f"{where}: not a value schema ({exc})") from None
        return cls(schema)

    def merge(self, other: ValueSchema) -> ValueSchema:
        """Both schemas' fields; a field whose types conflict becomes text (its canonical JSON)."""
        try:
            return ValueSchema(pa.unify_schemas([self.schema, other.schema], promote_options="permissive"))
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        fields = {f.name: f for f in self.schema}
        for f in other.schema:
            old = fields.get(f.name)
            if old is None or pa.types.is_null(old.type):
                fields[f.name] = f
            elif not pa.types.is_null(f.type) and old.type != f.type:
                fields[f.name] = pa.field(f.name, pa.string())
        return ValueSchema(pa.schema(list(fields.values())))


def infer_schema(values: pa.Array, structured: pa.Array) -> ValueSchema | None:
    """The Arrow schema of the structured values that are JSON objects (None when there are none)."""
    texts = pc.filter(values, structured).view(pa.string())  # canonical JSON: UTF-8 by construction
    objects = pc.filter(texts, pc.starts_with(texts, "{"))
    if not len(objects):
        return None
    one = pa.ListArray.from_arrays(pa.array([0, len(objects)], pa.int32()), objects)
    text = pc.binary_join(one, "\n")[0].as_buffer()
    longest = pc.max(pc.binary_length(objects)).as_py()
    block = max(1 << 20, 2 * longest)
    try:
        table = pajson.read_json(pa.BufferReader(text), read_options=pajson.ReadOptions(block_size=block))
    except pa.ArrowNotImplementedError:  # a field null in the first block and a struct later: blocks
        # infer apart and Arrow cannot widen null to struct between them; one block infers it whole
        return _infer_in_one_block(text, objects)
    except pa.ArrowInvalid:  # a field whose type changes between rows: infer each row alone, then merge
        return _infer_row_by_row(objects)
    return ValueSchema(table.schema)


def _infer_in_one_block(text: pa.Buffer, objects: pa.Array) -> ValueSchema:
    """The schema of all `objects` inferred as one block (row by row when their types disagree)."""
    try:
        table = pajson.read_json(pa.BufferReader(text), read_options=pajson.ReadOptions(block_size=len(text) + 1))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _infer_row_by_row(objects)
    return ValueSchema(table.schema)


def _infer_row_by_row(objects: pa.Array) -> ValueSchema:
    """The schema of `objects` inferred one row at a time and merged (types that change between rows)."""
    rows = (ValueSchema(pajson.read_json(io.BytesIO(line.encode("utf-8"))).schema) for line in objects.to_pylist())
    return functools.reduce(ValueSchema.merge, rows)  # `objects` holds one object at least


def read_schema(storage: Any, path: str) -> ValueSchema | None:
    """The value schema stored at `path` (a Storage path), or None when there is none."""
    try:
        raw = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    return ValueSchema.from_json(raw, path)


def record_schema(storage: Any, path: str, new: ValueSchema | None) -> None:
    """Merge `new` into the schema stored at `path` (written before the records it describes)."""
    if new is None:
        return
    old = read_schema(storage, path)
    merged = new if old is None else old.merge(new)
    if old is None or not merged.schema.equals(old.schema):
        storage.write_atomic(path, merged.to_json())
