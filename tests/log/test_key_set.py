"""A set of binary keys asked about batches of keys (the offset map's key set, segments/offset_map.py):
exact, whatever the keys' hashes."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from compaction_assets.segments.offset_map import HASHED_EDGE, KeySet, hashed, key_hash


def _random_keys(rng: random.Random, n: int) -> list[bytes]:
    """Keys of 0 to 80 bytes, many sharing a prefix (as a tenant and an id do)."""
    return [(b"tenant-" if rng.random() < 0.5 else b"") + rng.randbytes(rng.randrange(0, 73)) for _ in range(n)]


def test_membership_is_the_keys_bytes_in_every_batch_and_array_type():
    rng = random.Random(7)
    members = _random_keys(rng, 5_000) + [b""]
    others = _random_keys(rng, 5_000)
    # the set holds a key twice, as chunks of 64-bit offsets
    stored = pa.chunked_array(
        [pa.array(members[:3_000], pa.large_binary()), pa.array(members[2_000:], pa.large_binary())]
    )
    key_set = KeySet(stored)
    asked = members + others
    rng.shuffle(asked)
    expected = np.array([key in set(members) for key in asked])
    assert 0 < expected.sum() < len(asked)
    # a batch at a time, as a slice, as chunks and as strings: the same answers
    found = np.concatenate(
        [key_set.contains(pa.array(asked[i : i + 1_000], pa.binary())) for i in range(0, len(asked), 1_000)]
    )
    assert np.array_equal(found, expected)
    array = pa.array(asked, pa.binary())
    assert np.array_equal(key_set.contains(array.slice(10, 500)), expected[10:510])
    assert np.array_equal(key_set.contains(pa.chunked_array([array.slice(0, 7), array.slice(7)])), expected)
    text = [k.hex() for k in members[:50]]
    assert KeySet(pa.array(text, pa.string())).contains(pa.array(text + ["nope"], pa.string())).tolist() == [
        True
    ] * 50 + [False]


def test_keys_that_share_a_hash_are_told_apart_by_their_bytes():
    # long keys that differ only between the hashed edges share a hash
    def key(middle: bytes) -> bytes:
        return b"a" * HASHED_EDGE + middle + b"z" * HASHED_EDGE

    one, other, third = key(b"1111111111"), key(b"2222222222"), key(b"3333333333")
    assert len(set(key_hash(pa.array([one, other, third], pa.binary())).tolist())) == 1
    only_one = KeySet(pa.array([one], pa.binary()))
    assert only_one.contains(pa.array([other, one, third], pa.binary())).tolist() == [False, True, False]
    # several keys of one hash held: each found past the others in the table
    two = KeySet(pa.array([one, other], pa.binary()))
    assert two.contains(pa.array([third, other, one], pa.binary())).tolist() == [False, True, True]


def test_an_empty_set_holds_nothing_and_null_keys_are_refused():
    empty = KeySet(pa.array([], pa.binary()))
    assert len(empty) == 0
    assert empty.contains(pa.array([b"", b"k"], pa.binary())).tolist() == [False, False]
    assert empty.contains(pa.array([], pa.binary())).tolist() == []
    with pytest.raises(ValueError, match="null"):
        KeySet(pa.array([b"k", None], pa.binary()))
    with pytest.raises(ValueError, match="null"):
        empty.contains(pa.array([None], pa.binary()))


def test_keys_hashed_before_the_set_exists_get_the_same_answers():
    rng = random.Random(11)
    members, others = _random_keys(rng, 2_000), _random_keys(rng, 2_000)
    asked = pa.array(members[::3] + others, pa.binary())
    early = hashed(asked)  # as the probe hashes a batch read while the newer keys are being found
    key_set = KeySet(pa.array(members, pa.binary()))
    assert np.array_equal(key_set.contains_hashed(early), key_set.contains(asked))
    assert key_set.contains_hashed(early).tolist() == [key in set(members) for key in members[::3] + others]
