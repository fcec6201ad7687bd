"""A set of binary keys, built once and asked about many batches of keys: by hash, checked byte for byte.

Arrow's `is_in` builds its hash set of the value set on every call, so a test of a long array had to be one
call over keys held whole. This set is an open-addressing table of the keys' 64-bit hashes (keys.py), built
once: a batch of keys is hashed, looked up by a few numpy gathers, and every hit is checked against the
set's key byte for byte, so two keys that share a hash are told apart. Like keys.py, it needs only numpy and
pyarrow (the probe ships it to Spark's Python workers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from compaction_assets.segments.keys import KeyBytes

EMPTY = np.uint64(0)  # a slot of the table that holds no key (a key hashed to 0 is stored as 1)


@dataclass(frozen=True)
class HashedKeys:
    """An array of keys read as words, with their hashes as a KeySet holds them: a batch hashed before
    the set it is tested against exists."""

    keys: KeyBytes
    hashes: np.ndarray


def hashed(keys: pa.Array | pa.ChunkedArray) -> HashedKeys:
    """`keys` (without nulls) read and hashed for `KeySet.contains_hashed`."""
    _no_nulls(keys)
    asked = KeyBytes(keys)
    return HashedKeys(asked, _stored(asked.hash()))


class KeySet:
    """The keys of a binary (or string) array, for membership tests of other arrays of keys."""

    def __init__(self, keys: pa.Array | pa.ChunkedArray):
        stored = hashed(keys)
        self.keys, self.hashes = stored.keys, stored.hashes
        # a filter of at least 8 bits a key (a bit a hash's top bits; 256 KB for 200k keys: it stays in a
        # core's cache) turns away about 9 in 10 of the keys not in the set before the table is read
        bits = max(6, int(8 * len(self.hashes)).bit_length())
        self.filter_shift = np.uint64(64 - bits)
        self.filter = np.zeros(1 << (bits - 6), np.uint64)
        at = (self.hashes >> self.filter_shift).astype(np.int64)
        np.bitwise_or.at(self.filter, at >> 6, np.left_shift(np.uint64(1), (at & 63).astype(np.uint64)))
        # a table of at least twice the keys, a power of two: few probes past the first slot
        size = 1 << max(4, int(2 * len(self.hashes)).bit_length())
        self.mask = np.uint64(size - 1)
        # a slot's key hash (EMPTY: none), looked up first; its key's row, read only when the hash is equal
        self.slot_hashes = np.zeros(size, np.uint64)
        self.rows = np.zeros(size, np.int64)
        self._insert(np.arange(len(self.hashes), dtype=np.int64))

    def __len__(self) -> int:
        return len(self.hashes)

    def _insert(self, pending: np.ndarray) -> None:
        """Place the rows `pending` by linear probing, all of them a round at a time."""
        slots = (self.hashes[pending] & self.mask).astype(np.int64)
        while len(pending):
            free = self.slot_hashes[slots] == EMPTY
            self.rows[slots[free]] = pending[free]  # of rows that want one slot, one gets it
            placed = free & (self.rows[slots] == pending)
            self.slot_hashes[slots[placed]] = self.hashes[pending[placed]]
            pending, slots = pending[~placed], (slots[~placed] + 1) & np.int64(self.mask)

    def contains(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Whether each of `keys` is in the set (a numpy boolean array)."""
        return self.contains_hashed(hashed(keys))

    def contains_hashed(self, asked: HashedKeys) -> np.ndarray:
        """Whether each of the keys `asked` is in the set (a numpy boolean array)."""
        hashes = asked.hashes
        found = np.zeros(len(hashes), bool)
        if not len(self.hashes):
            return found
        at = (hashes >> self.filter_shift).astype(np.int64)
        passed = (self.filter[at >> 6] >> (at & 63).astype(np.uint64)) & np.uint64(1)
        open_rows = np.flatnonzero(passed)
        slots = (hashes[open_rows] & self.mask).astype(np.int64)
        while len(open_rows):
            held = self.slot_hashes[slots]
            at = np.flatnonzero(held == hashes[open_rows])
            going = held != EMPTY  # a key's probe ends at its key or at an empty slot
            if len(at):
                same_key = self.keys.same_as_in(self.rows[slots[at]], asked.keys, open_rows[at])
                found[open_rows[at[same_key]]] = True
                going[at[same_key]] = False  # (another key of the same hash: the probe goes on)
            open_rows, slots = open_rows[going], (slots[going] + 1) & np.int64(self.mask)
        return found


def _stored(hashes: np.ndarray) -> np.ndarray:
    """Key hashes as the table holds them: 0 marks an empty slot, so a key hashed to 0 is held as 1 (the
    check of its bytes tells it from a key hashed to 1)."""
    hashes[hashes == EMPTY] = 1
    return hashes


def _no_nulls(keys: pa.Array | pa.ChunkedArray) -> None:
    """A null key has no bytes to tell it from an empty one (a segment's keys are never null)."""
    if keys.null_count:
        raise ValueError(f"a key set takes keys without nulls, not {keys.null_count} null key(s)")
