"""Binary keys as numbers (the offset map, segments/offset_map.py): a hash that is the key's bytes wherever they
lie, and a numbering and winners that are exact when keys share a hash."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compaction_assets.segments.offset_map import HASHED_EDGE, KeyBytes, highest_offsets, key_hash, key_numbers


def _same_partition(numbers: np.ndarray, keys: list[bytes]) -> bool:
    """Whether `numbers` groups the rows exactly as the keys' bytes do."""
    by_key: dict[bytes, int] = {}
    by_number: dict[int, bytes] = {}
    for key, number in zip(keys, numbers.tolist()):
        if by_key.setdefault(key, number) != number or by_number.setdefault(number, key) != key:
            return False
    return True


def test_a_key_hashes_alike_wherever_it_lies_and_keys_spread_over_buckets():
    keys = [f"user-{i:06d}".encode() for i in range(20_000)]
    whole = key_hash(pa.array(keys, pa.binary()))
    # a slice, a chunked array, 64-bit offsets and a key alone: the same hash (the key's bytes, not its
    # position in a buffer)
    assert np.array_equal(key_hash(pa.array(keys, pa.binary()).slice(5_000, 10)), whole[5_000:5_010])
    chunked = pa.chunked_array([pa.array(keys[:7], pa.binary()), pa.array(keys[7:20], pa.binary())])
    assert np.array_equal(key_hash(chunked), whole[:20])
    assert np.array_equal(key_hash(pa.array(keys, pa.large_binary())), whole)
    assert key_hash(pa.array([keys[123]], pa.binary()))[0] == whole[123]
    # keys that share a prefix spread evenly over the buckets
    for buckets in (2, 8, 13):
        counts = np.bincount((whole % np.uint64(buckets)).astype(np.int64), minlength=buckets)
        assert counts.min() > 0.85 * len(keys) / buckets, (buckets, counts)
    # keys that share the first bytes and differ at the end (longer than the hashed edge); empty keys
    long_keys = [b"t" * (3 * HASHED_EDGE) + str(i).encode() for i in range(1_000)]
    assert len(set(key_hash(pa.array(long_keys, pa.binary())).tolist())) == len(long_keys)
    assert key_hash(pa.array([b"", b"", b"a"], pa.binary())).tolist()[:2] == [key_hash(pa.array([b""]))[0]] * 2
    assert len(key_hash(pa.array([], pa.binary()))) == 0
    # a key's bytes past its end do not count: "ab" beside "abc" in one buffer hashes as "ab" alone
    assert key_hash(pa.array([b"ab", b"abc"]))[0] == key_hash(pa.array([b"ab"]))[0]
    assert key_hash(pa.array([b"ab"]))[0] != key_hash(pa.array([b"ab\x00"]))[0]


def test_numbers_group_rows_exactly_as_the_keys_bytes_do():
    rng = np.random.default_rng(7)
    # lengths from 0 to 80 bytes (past both hashed edges), few distinct keys, zero bytes inside keys
    pool = [bytes(rng.integers(0, 3, size=int(n), dtype=np.uint8)) for n in rng.integers(0, 81, size=3_000)]
    keys = [pool[i] for i in rng.integers(0, len(pool), size=20_000)]
    numbers, count = key_numbers(pa.array(keys, pa.binary()))
    assert count == len(set(keys)) and numbers.min() == 0 and numbers.max() == count - 1
    assert _same_partition(numbers, keys)
    chunked = pa.chunked_array([pa.array(keys[:9_999], pa.binary()), pa.array(keys[9_999:], pa.binary())])
    assert _same_partition(key_numbers(chunked)[0], keys)
    assert _same_partition(key_numbers(pa.array(keys, pa.binary()).slice(3, 500))[0], keys[3:503])
    assert key_numbers(pa.array([], pa.binary()))[1] == 0


def test_keys_that_share_a_hash_are_still_told_apart():
    # longer than both hashed edges and different only in the middle: one hash for all of them
    keys = [b"a" * HASHED_EDGE + b"%04d" % (i % 50) + b"b" * HASHED_EDGE for i in range(400)]
    assert len(set(key_hash(pa.array(keys)).tolist())) == 1
    key_bytes = KeyBytes(pa.array(keys))
    rows = np.arange(len(keys))
    assert not key_bytes.same_as_in(rows, key_bytes, np.zeros(len(keys), np.int64)).all()
    numbers, count = key_numbers(pa.array(keys))
    assert count == 50 and _same_partition(numbers, keys)
    # the winners of those keys: each one's highest offset, as Arrow's own group-by finds them
    table = pa.table({"key": pa.array(keys), "offset": pa.array(np.arange(400, dtype=np.int64))})
    won = table.filter(highest_offsets(table))
    expected = table.group_by("key").aggregate([("offset", "max")])
    assert sorted(won.column("offset").to_pylist()) == sorted(expected.column("offset_max").to_pylist())
    assert pc.all(pc.greater_equal(won.column("offset"), 350)).as_py()


def test_a_keys_hash_does_not_depend_on_its_neighbours():
    keys = [b"", b"a", b"x" * 40, b"y" * 70]
    alone = [key_hash(pa.array([key]))[0] for key in keys]
    assert key_hash(pa.array(keys)).tolist() == alone
    assert key_hash(pa.array(keys + [b"z" * 200])).tolist()[:4] == alone


def test_a_null_key_is_not_an_empty_one():
    numbers, count = key_numbers(pa.array([b"", None, b"", None, b"x"], pa.binary()))
    assert count == 3 and numbers[0] == numbers[2] and numbers[1] == numbers[3]
    assert len({numbers[0], numbers[1], numbers[4]}) == 3


def test_a_keys_words_are_its_own_bytes_wherever_it_ends():
    # words are read in Arrow's buffer where it lies: a last key's words run past the buffer's end (read
    # from its last word, shifted down), any other key's into its neighbour's bytes (masked off)
    rng = np.random.default_rng(11)
    for length in range(41):
        keys = [bytes(rng.integers(1, 256, size=int(n), dtype=np.uint8)) for n in rng.integers(0, 30, size=5)]
        keys.append(bytes(rng.integers(1, 256, size=length, dtype=np.uint8)))
        key_bytes = KeyBytes(pa.array(keys, pa.binary()))
        for j in range(key_bytes.word_count()):
            expected = [int.from_bytes(key[8 * j : 8 * j + 8].ljust(8, b"\0"), "little") for key in keys]
            assert key_bytes.word(j).tolist() == expected, (length, j)
            assert key_bytes.word_at(j, np.array([len(keys) - 1, 0])).tolist() == [expected[-1], expected[0]]
        assert key_hash(pa.array(keys[-1:], pa.binary()))[0] == key_hash(pa.array(keys + [b"tail"], pa.binary()))[-2]
