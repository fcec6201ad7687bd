"""The offset map: binary keys hashed, numbered and tested for membership, and the row of each key's
highest offset (Kafka's `SkimpyOffsetMap` is this one concept in one class).

- `KeyBytes` reads an array's keys as 8-byte words (one numpy gather a word for every key, not a pass a
  byte) and `key_hash` mixes them into a 64-bit hash of each key: the split of a range into buckets and
  the key set use it, and pyarrow has no hash kernel to give it.
- `split_by_key` splits rows into buckets of keys by that hash (Arrow's stable sort of the bucket numbers
  and a take), carrying the hash with the rows.
- `key_numbers` and `highest_offsets` find each key's winner under the offset strategy. Where the split
  into buckets has hashed the keys, their hashes are numbered and checked byte for byte; elsewhere Arrow's
  dictionary encoding numbers the keys (docs/architecture.md, "Hand-written pieces against the libraries",
  says which costs less where).
- `KeySet` is a set of keys built once and asked about many batches: Arrow's `is_in` builds its hash set of
  the value set on every call, so a test of a long array had to be one call over keys held whole. The set
  is an open-addressing table of the keys' hashes; a batch of keys is hashed, looked up by a few numpy
  gathers, and every hit is checked against the set's key byte for byte, so two keys that share a hash are
  told apart.

It needs only numpy and pyarrow: the probe ships it to Spark's Python workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.segments.arrays import from_numpy, to_numpy

HASHED_EDGE = 32  # bytes hashed at each end of a key (a longer key's middle is not hashed, but checked)
_WORD = 8
_EDGE_WORDS = HASHED_EDGE // _WORD
_FNV_BASIS = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
# a word's first n bytes (little-endian), n = 0 to 8
_MASKS = np.array([(1 << (8 * n)) - 1 for n in range(_WORD + 1)], np.uint64)


class KeyBytes:
    """The bytes of an array of binary keys, read as 8-byte words."""

    def __init__(self, keys: pa.Array | pa.ChunkedArray):
        keys = one_chunk(keys)
        wide = pa.types.is_large_binary(keys.type) or pa.types.is_large_string(keys.type)
        bounds = np.frombuffer(keys.buffers()[1], np.int64 if wide else np.int32)
        bounds = bounds[keys.offset : keys.offset + len(keys) + 1].astype(np.int64)
        raw = keys.buffers()[2]
        raw = np.frombuffer(raw, np.uint8) if raw is not None else np.zeros(0, np.uint8)
        if len(raw) < _WORD:  # fewer bytes than a word: padded with zeros (a word is read whole)
            raw = np.concatenate([raw, np.zeros(_WORD - len(raw), np.uint8)])
        self.data = raw
        self.starts = bounds[:-1]
        self.lengths = np.diff(bounds)
        self.longest = int(self.lengths.max()) if len(keys) else 0
        # every byte position's 8 bytes as one (unaligned) number, read in Arrow's buffer where it lies (a
        # padded copy of the keys' bytes cost as much as their hash: its memory was new to the process)
        self.words_at = np.ndarray(shape=(len(self.data) - _WORD + 1,), dtype=np.uint64, buffer=self.data, strides=(1,))
        self._front: dict[int, np.ndarray] = {}

    def word(self, index: int) -> np.ndarray:
        """The `index`-th word of every key, zero past a key's end (the first HASHED_EDGE bytes' words are
        kept: the hash and the check of equal keys both read them)."""
        if index in self._front:
            return self._front[index]
        word = self._words(index, self.starts, self.lengths)
        if index < _EDGE_WORDS:
            self._front[index] = word
        return word

    def _words(self, index: int, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """The `index`-th word of the keys that start at `starts` and have `lengths`, zero past their end."""
        left = np.clip(lengths - _WORD * index, 0, _WORD)
        at = starts + _WORD * index
        last = len(self.words_at) - 1
        word = self.words_at[np.minimum(at, last)]
        # a word that would run past the buffer's end is read from its last word and shifted down to
        # where it starts (the bytes past the end come in as zeros; only a last key's tail lies there)
        over = np.flatnonzero(at > last)
        if len(over):
            word[over] >>= ((at[over] - last) * 8).astype(np.uint64)
        if (left < _WORD).any():
            word &= _MASKS[left]
        return word

    def hash(self) -> np.ndarray:
        """A 64-bit hash of each key: its length, its first and last HASHED_EDGE bytes, mixed."""
        h = _FNV_BASIS ^ self.lengths.astype(np.uint64)
        ends = self.starts + self.lengths
        # (word, whether each key has it): a key's hash mixes its own words only, whatever its neighbours'
        words = [(self.word(j), self.lengths > _WORD * j) for j in range(min(self.word_count(), _EDGE_WORDS))]
        # the last words of keys longer than the first ones (keys of JSON objects or of a tenant and an id
        # differ at either end), whole words ending at the key's end
        words += [
            (self.words_at[np.maximum(ends - _WORD * (j + 1), 0)], self.lengths > HASHED_EDGE + _WORD * j)
            for j in range(min(max(-(-(self.longest - HASHED_EDGE) // _WORD), 0), _EDGE_WORDS))
        ]
        with np.errstate(over="ignore"):
            for word, present in words:
                mixed = (h ^ word) * _FNV_PRIME
                mixed ^= mixed >> np.uint64(32)  # the product carries low bits up only: bring the high ones down
                h = np.where(present, mixed, h)
            h ^= h >> np.uint64(31)
            h *= _MIX
            h ^= h >> np.uint64(29)
        return h

    def word_count(self) -> int:
        """Words of the longest key."""
        return -(-self.longest // _WORD)

    def word_at(self, index: int, rows: np.ndarray) -> np.ndarray:
        """The `index`-th word of the keys at `rows` (as `word`, without reading the other keys')."""
        if index in self._front:
            return self._front[index][rows]
        return self._words(index, self.starts[rows], self.lengths[rows])

    def same_as(self, rows: np.ndarray) -> np.ndarray:
        """Whether each key is byte for byte the key at row `rows[i]`."""
        same = self.lengths == self.lengths[rows]
        for j in range(self.word_count()):
            word = self.word(j)
            same &= word == word[rows]
        return same

    def same_as_in(self, rows: np.ndarray, other: KeyBytes, other_rows: np.ndarray) -> np.ndarray:
        """Whether the key at each of `rows` is byte for byte the key of `other` at `other_rows[i]`."""
        same = self.lengths[rows] == other.lengths[other_rows]
        # keys of equal length have as many words, zero past their end
        for j in range(min(self.word_count(), other.word_count())):
            same &= self.word_at(j, rows) == other.word_at(j, other_rows)
        return same


def key_hash(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each binary key (its bytes, not where they lie in a buffer)."""
    return KeyBytes(keys).hash()


def key_numbers(keys: pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Each key's number (int64, 0 to count - 1, equal keys alike; a null key is one key) and the count of
    distinct keys. Given the keys' `key_hash` (worked out where the keys were split by it), the hashes are
    numbered and every key checked byte for byte against its number's first key, which costs less than
    Arrow's numbering of the keys themselves; without them, or when two keys share a hash, Arrow numbers
    the keys."""
    if hashes is not None and len(keys) and not keys.null_count:
        key_bytes = KeyBytes(keys)
        encoded = pc.dictionary_encode(from_numpy(hashes))
        numbers = to_numpy(encoded.indices).astype(np.int64, copy=False)
        first = np.full(len(encoded.dictionary), len(numbers), np.int64)
        np.minimum.at(first, numbers, np.arange(len(numbers), dtype=np.int64))
        if key_bytes.same_as(first[numbers]).all():
            return numbers, len(encoded.dictionary)
    encoded = pc.dictionary_encode(one_chunk(keys), null_encoding="encode")
    return to_numpy(encoded.indices).astype(np.int64, copy=False), len(encoded.dictionary)


def one_chunk(keys: pa.Array | pa.ChunkedArray) -> pa.Array:
    """`keys` as one array (64-bit value offsets past 2 GiB of binary keys, which 32-bit ones cannot address)."""
    if not isinstance(keys, pa.ChunkedArray):
        return keys
    if keys.nbytes >= 2**31 and (pa.types.is_binary(keys.type) or pa.types.is_string(keys.type)):
        keys = keys.cast(pa.large_string() if pa.types.is_string(keys.type) else pa.large_binary())
    return keys.combine_chunks() if keys.num_chunks else pa.array([], keys.type)


def highest_offsets(table: pa.Table, hashes: np.ndarray | None = None) -> pa.Array:
    """Per row of `table` (key and offset columns): whether it holds its key's highest offset, the
    offset strategy's winner. Offsets are unique, so numbering the keys and each number's highest offset
    find those rows in place, with no sort of the records (and not with Arrow's group-by, whose engine
    imports pandas, which a cleaning otherwise never needs). `hashes`: the keys' `key_hash`, when the caller
    has them."""
    if not len(table):
        return from_numpy(np.zeros(0, bool))
    key_number, count = key_numbers(table.column("key"), hashes)
    offsets = to_numpy(table.column("offset"))
    best = np.full(count, np.iinfo(np.int64).min)
    np.maximum.at(best, key_number, offsets)
    return from_numpy(offsets == best[key_number])


# --- the key set ---------------------------------------------------------------------------------------

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


# the column `split_by_key` adds: each row's key hash, which numbering a bucket's keys reads (not the keys' bytes again)
KEY_HASH = "_key_hash"


def split_by_key(table: pa.Table, buckets: int) -> list[pa.Table]:
    """`table` in `buckets` parts by a hash of its binary `key` column, the hash as column KEY_HASH: every
    row of a key in one part, in the table's order (Arrow's sort of the bucket numbers is stable)."""
    # the hash goes with the rows: numbering a bucket's keys reads it, not the keys' bytes again
    hashes = key_hash(table.column("key"))
    table = table.append_column(KEY_HASH, from_numpy(hashes))
    if buckets == 1:
        return [table]
    bucket = (hashes % np.uint64(buckets)).astype(np.int64)
    ordered = table.take(pc.sort_indices(from_numpy(bucket)))
    counts = np.bincount(bucket, minlength=buckets)
    starts = np.cumsum(counts) - counts
    return [ordered.slice(int(starts[part]), int(counts[part])) for part in range(buckets)]
