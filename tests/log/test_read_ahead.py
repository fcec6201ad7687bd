"""The read-ahead of an append's pieces: same items in order, the producer's error raised at its item,
and a consumer that leaves early stops the producer and closes its generator."""

import threading

import pytest

from compaction_assets.log.read_ahead import ReadAhead


def test_items_come_in_order_and_one_is_read_ahead():
    produced = []
    consumed_while_producing = []

    def items():
        for i in range(5):
            produced.append(i)
            yield i

    with ReadAhead(items()) as each:
        for item in each:
            consumed_while_producing.append((item, len(produced)))
    assert [item for item, _ in consumed_while_producing] == [0, 1, 2, 3, 4]
    # the producer never runs more than one item (plus the one it is blocked offering) ahead
    assert all(seen <= item + 3 for item, seen in consumed_while_producing)


def test_an_error_of_the_producer_is_raised_at_its_item():
    def items():
        yield "a"
        raise ValueError("file b: not Parquet")

    got = []
    with pytest.raises(ValueError, match="file b: not Parquet"), ReadAhead(items()) as each:
        for item in each:
            got.append(item)
    assert got == ["a"]


def test_leaving_early_stops_the_producer_and_closes_its_generator():
    closed = threading.Event()

    def items():
        try:
            yield from range(1000)
        finally:
            closed.set()

    ahead = ReadAhead(items())
    with pytest.raises(RuntimeError, match="write failed"), ahead as each:
        for item in each:
            if item == 2:
                raise RuntimeError("write failed")
    assert closed.is_set() and not ahead._thread.is_alive()
