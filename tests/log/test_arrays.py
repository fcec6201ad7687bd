"""numpy and Arrow arrays converted without pandas (segments/arrays.py): the same values, types, nulls and
slices as pyarrow's own conversions give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from compaction_assets.segments.arrays import from_numpy, from_strings, scalar, to_numpy


@pytest.mark.parametrize(
    "dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64", "float32", "float64", "bool"]
)
def test_numbers_and_booleans_go_both_ways_as_pyarrow_converts_them(dtype):
    rng = np.random.default_rng(7)
    values = (rng.random(45) < 0.5) if dtype == "bool" else (rng.random(45) * 100).astype(dtype)
    ours = from_numpy(values)
    assert ours.equals(pa.array(values)) and ours.type == pa.array(values).type
    ours.validate(full=True)
    # whole, sliced at an offset that is not a whole byte of booleans, empty, and chunked
    for array in (
        ours,
        ours.slice(3, 20),
        ours.slice(45, 0),
        pa.chunked_array([ours.slice(0, 5), ours.slice(9, 11)]),
        pa.chunked_array([], ours.type),
    ):
        got = to_numpy(array)
        assert got.dtype == np.dtype(dtype) and np.array_equal(
            got, np.asarray(array.to_numpy(zero_copy_only=False), dtype)
        )


def test_a_mask_makes_nulls_and_nulls_take_arrows_own_conversion():
    values, mask = np.arange(10, dtype=np.int64), np.array([i % 3 == 0 for i in range(10)])
    array = from_numpy(values, mask=mask)
    array.validate(full=True)
    assert array.to_pylist() == [None if m else int(v) for v, m in zip(values, mask)]
    assert from_numpy(values, mask=np.zeros(10, bool)).null_count == 0
    # a column with nulls is not the fast path's: converted as pyarrow converts it
    np.testing.assert_array_equal(to_numpy(array), array.to_numpy(zero_copy_only=False))
    with pytest.raises(TypeError, match="numbers or booleans"):
        from_numpy(np.array(["a", "b"]))


def test_strings_and_scalars():
    strings = from_strings([None, "", "é", '{"kept": 3}', None])
    strings.validate(full=True)
    assert strings.equals(pa.array([None, "", "é", '{"kept": 3}', None], pa.string()))
    assert len(from_strings([])) == 0 and from_strings([]).type == pa.string()
    assert scalar(5) == pa.scalar(5, pa.int64()) and scalar(None).is_valid is False
    assert scalar(3, pa.int32()) == pa.scalar(3, pa.int32()) and scalar(True, pa.bool_()).as_py() is True
