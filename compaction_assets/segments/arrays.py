"""numpy arrays and Arrow arrays, one into the other, without asking pandas; and the masks over a segment's
offsets (which are in a sorted set, which are visible, which run of segments each falls in).

`pa.array`, `pa.scalar`, `Array.to_numpy` and compute functions handed Python values each ask pandas
whether their argument is one of its types, and the first question imports pandas, a large import that a
cleaning, which needs nothing from pandas, would pay on every run. These build the same arrays over
the same buffers (zero-copy where Arrow's own conversion is). Like segment_task, which uses it, this module
needs only numpy and pyarrow, and is shipped to Spark's Python workers by value."""

from __future__ import annotations

from typing import Any

# Arrow's names of the types these convert, as numpy names them (numpy and pyarrow are imported where
# used, as in segment_task: importing this module costs nothing)
_NUMPY_TYPES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint8": "uint8",
    "uint16": "uint16",
    "uint32": "uint32",
    "uint64": "uint64",
    "float": "float32",
    "double": "float64",
    "bool": "bool",
}


def from_numpy(values, mask=None) -> Any:
    """A numeric or boolean numpy array (or list of ints) as an Arrow array of its type; null where `mask`."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        arrow_type, data = pa.bool_(), pa.py_buffer(np.packbits(values, bitorder="little"))
    elif values.dtype.kind in "iuf":
        arrow_type, data = pa.from_numpy_dtype(values.dtype), pa.py_buffer(values)
    else:
        raise TypeError(f"from_numpy takes numbers or booleans, not {values.dtype}")
    validity = None
    if mask is not None and np.any(mask):
        validity = pa.py_buffer(np.packbits(~np.asarray(mask, bool), bitorder="little"))
    return pa.Array.from_buffers(arrow_type, len(values), [validity, data])


def to_numpy(array) -> Any:
    """A numeric or boolean Arrow array or chunked array as numpy: a view of one chunk of numbers without
    nulls (read-only, as Arrow's own), else a copy. Nulls take Arrow's own conversion (and pandas)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        parts = [to_numpy(chunk) for chunk in array.chunks]
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.zeros(0, _numpy_type(array.type))
    if array.null_count or str(array.type) not in _NUMPY_TYPES:
        return array.to_numpy(zero_copy_only=False)
    n, start, data = len(array), array.offset, array.buffers()[1]
    if array.type == pa.bool_():
        if not n:
            return np.zeros(0, bool)
        packed = np.frombuffer(data, np.uint8, count=(start + n + 7) // 8)
        return np.unpackbits(packed, bitorder="little")[start : start + n].view(np.bool_)
    dtype = np.dtype(_numpy_type(array.type))
    if not n:
        return np.zeros(0, dtype)
    return np.frombuffer(data, dtype, count=n, offset=start * dtype.itemsize)


def scalar(value: int | None, arrow_type=None) -> Any:
    """An Arrow scalar of `arrow_type` (a number type, int64 by default; None for null)."""
    import numpy as np
    import pyarrow as pa

    arrow_type = arrow_type or pa.int64()
    if value is None:
        return pa.nulls(1, arrow_type)[0]
    return from_numpy(np.array([value], _numpy_type(arrow_type)))[0]


def _numpy_type(arrow_type) -> str:
    return _NUMPY_TYPES[str(arrow_type)]


def from_strings(values: list) -> Any:
    """A list of str (or None) as an Arrow string array."""
    import numpy as np
    import pyarrow as pa

    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(encoded) + 1, np.int32)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    missing = np.array([v is None for v in values], bool)
    validity = pa.py_buffer(np.packbits(~missing, bitorder="little")) if missing.any() else None
    return pa.Array.from_buffers(
        pa.string(), len(values), [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    )


def in_sorted(values, sorted_set):
    """A numpy mask: whether each of `values` (int64) is in `sorted_set` (a numpy array, ascending).

    A binary search per value: Arrow's `is_in` builds a hash set of its value set on every call, so
    filtering many files or batches against one set of offsets rebuilt it each time (a forced cleaning
    of 5M records spent more CPU on that than on reading its files)."""
    import numpy as np

    values = np.asarray(values)
    if not len(sorted_set) or not len(values):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def visible_mask(offsets, min_offset: int | None, dead=None):
    """A numpy mask: whether each of `offsets` is visible, at or above the log start `min_offset` and not
    in the deletion vector `dead` (ascending numpy array, or None)."""
    import numpy as np

    visible = offsets >= min_offset if min_offset is not None else np.ones(len(offsets), dtype=bool)
    if dead is not None and len(dead):
        visible &= ~in_sorted(offsets, dead)
    return visible


def bucket_labels(starts: list[tuple[int, int]], offsets):
    """Numpy: the label of the last (label, first offset) pair at or below each offset (an int64
    array), as `offset_bucket` (log/reader.py) computes it in Spark (every offset at or above the lowest
    first offset)."""
    import numpy as np

    pairs = sorted(starts, key=lambda pair: pair[1])
    firsts = np.array([first for _, first in pairs], dtype=np.int64)
    labels = np.array([label for label, _ in pairs], dtype=np.int32)
    return labels[np.searchsorted(firsts, offsets, side="right") - 1]
