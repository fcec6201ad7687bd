"""The time sensors and schedules evaluate at: the one place tests set (`frozen_at`), so a deadline
test moves the clock instead of sleeping. Assets take their time from run config (`now_ms`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from compaction_assets.store.log_store import wall_ms

_frozen_ms: list[int] = []  # a stack: the innermost `frozen_at` wins


def now_ms() -> int:
    """Milliseconds since the epoch: the frozen time when a test set one, else the wall clock."""
    return _frozen_ms[-1] if _frozen_ms else wall_ms()


@contextmanager
def frozen_at(milliseconds: int) -> Iterator[int]:
    """Within the block, every sensor and schedule evaluates at `milliseconds`."""
    _frozen_ms.append(int(milliseconds))
    try:
        yield int(milliseconds)
    finally:
        _frozen_ms.pop()
