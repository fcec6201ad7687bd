"""Binary keys as numbers: a 64-bit hash of each key, each key's exact number among an array's keys, and
which row holds each key's highest offset (the offset strategy's winner: Kafka's offset map).

Arrow's `dictionary_encode` of binary keys copies every distinct key into its hash table, the most of the
time of a range decided here. Numbering the keys' hashes (fixed-width numbers, no key copied), then
checking every row's key against its number's first row, costs less and is as exact: two keys that share a
hash fail the check, and the keys are then numbered by Arrow's own encoding.

The key bytes are read a word of 8 bytes at a time (one numpy gather a word for every key), not a byte
at a time: a key of 14 bytes is 2 passes over the keys, not 14.
"""

from __future__ import annotations

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

    def same_as_in(self, rows: np.ndarray, other: KeyBytes, other_rows: np.ndarray) -> np.ndarray:
        """Whether the key at each of `rows` is byte for byte the key of `other` at `other_rows[i]`."""
        same = self.lengths[rows] == other.lengths[other_rows]
        # keys of equal length have as many words, zero past their end
        for j in range(min(self.word_count(), other.word_count())):
            same &= self.word_at(j, rows) == other.word_at(j, other_rows)
        return same

    def same_as(self, rows: np.ndarray) -> np.ndarray:
        """Whether each key is byte for byte the key at row `rows[i]`."""
        same = self.lengths == self.lengths[rows]
        for j in range(self.word_count()):
            word = self.word(j)
            same &= word == word[rows]
        return same


def key_hash(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each binary key (its bytes, not where they lie in a buffer)."""
    return KeyBytes(keys).hash()


def key_numbers(keys: pa.Array | pa.ChunkedArray, hashes: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Each key's number (int64, 0 to count - 1, equal keys alike) and the count of distinct keys;
    `hashes`, when given, are the keys' `key_hash` (worked out where the keys were split by it)."""
    if len(keys) == 0:
        return np.zeros(0, np.int64), 0
    if keys.null_count:  # a null key has no bytes to tell it from an empty one
        return _arrow_numbers(keys)
    key_bytes = KeyBytes(keys)
    encoded = pc.dictionary_encode(from_numpy(key_bytes.hash() if hashes is None else hashes))
    numbers = to_numpy(encoded.indices).astype(np.int64, copy=False)
    count = len(encoded.dictionary)
    first = np.full(count, len(numbers), np.int64)
    np.minimum.at(first, numbers, np.arange(len(numbers), dtype=np.int64))
    if key_bytes.same_as(first[numbers]).all():
        return numbers, count
    return _arrow_numbers(keys)  # two keys share a hash


def _arrow_numbers(keys: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, int]:
    """Each key's number and the count of distinct keys, by Arrow's encoding (a null key is one key)."""
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
    offset strategy's winner. Offsets are unique, so numbering the keys (one hash pass) and each number's
    highest offset find those rows in place, with no sort of the records (and not with Arrow's group-by,
    whose engine imports pandas, which a cleaning otherwise never needs)."""
    if not len(table):
        return from_numpy(np.zeros(0, bool))
    # the keys numbered once over all chunks (by their hash, above): numbering chunks apart and unifying
    # their dictionaries afterwards copies and hashes every chunk's dictionary a second time
    # (`hashes`: the keys' key_hash, when the caller has it)
    key_number, count = key_numbers(table.column("key"), hashes)
    offsets = to_numpy(table.column("offset"))
    best = np.full(count, np.iinfo(np.int64).min)
    np.maximum.at(best, key_number, offsets)
    return from_numpy(offsets == best[key_number])
