"""Masks over a segment's offsets, in numpy: which offsets are in a sorted set of them, which are visible (at
or above the log start, not in the deletion vector), and which run of segments each falls in. They run in
Spark's Python workers as well as in this process, so this module imports only numpy (where used), as
`segment_task`, and is shipped to the workers by value with it.
"""

from __future__ import annotations


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
