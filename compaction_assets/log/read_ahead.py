"""Reading ahead: the next item of an iterator produced in a thread while the caller works on this one.

An append of many pieces (a landed group read a file at a time) alternates reading and shaping a file with
writing its records as Parquet; both spend their time in Arrow code that releases the GIL, so on two cores they
overlap. One item is read ahead, so memory holds at most two pieces.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

Item = TypeVar("Item")
_END = object()
_POLL_SECONDS = 0.1  # how often a producer blocked on a full queue looks whether the consumer has gone


class ReadAhead(Generic[Item]):
    """Iterate `items` with the next item produced in a thread; an error of the producer is raised to the
    consumer at the item where it happened. Use as a context manager: leaving it stops the producer."""

    def __init__(self, items: Iterator[Item]):
        self._items = items
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="read-ahead", daemon=True)

    def __enter__(self) -> ReadAhead[Item]:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopped.set()
        self._thread.join()

    def __iter__(self) -> Iterator[Item]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item

    def _produce(self) -> None:
        try:
            for item in self._items:
                if not self._offer(item):
                    return
            self._offer(_END)
        except BaseException as exc:  # handed to the consumer, which raises it as its own
            self._offer(_Failure(exc))
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:
                close()  # a generator left early releases what it holds (open files) in this thread

    def _offer(self, item: object) -> bool:
        while not self._stopped.is_set():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False


class _Failure:
    """An exception raised while producing, carried to the consumer."""

    def __init__(self, error: BaseException):
        self.error = error
