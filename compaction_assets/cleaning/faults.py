"""Whose fault a failed cleaning is: the engine's (retry the run, never mark the log) or the log's (mark it).

Kafka marks a partition uncleanable when its own data stops the cleaner. A Spark session that cannot
start, a Connect server restarted or down, a lost executor or Python worker, an out-of-memory driver or
an unreachable store say nothing about the log: marking every healthy log for them would turn one
restart into a manual repair of the whole fleet. So a failure marks its log only when it names one of the
log's files, or when the engine answers a trivial query afterwards (the fault then stays with the log):
`failed_cleaning` turns a failure into the error the run raises, marking the log when the fault is its own.

A fault that may come from the log's data although it reads as the engine's (out of memory, a lost worker
or executor: one huge record does that) is counted on the log when the engine answers afterwards. Kafka
marks a partition whose cleaning throws; here the log is marked once its cleanings failed so
ENGINE_FAULT_STRIKES times in a row with another log of the store cleaned between each two: the engine
did work for others, so the fault is the log's. A machine short of memory fails every log's cleaning,
none cleans in between, and none is marked.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator

from compaction_assets.cleaning.commits import Mark, mark_uncleanable, one_line, record_engine_fault
from compaction_assets.errors import AlreadyReportedError, CompactionError, EngineError, SuspectEngineFault
from compaction_assets.log.reader import find_unreadable
from compaction_assets.log.strategies import strategy_of
from compaction_assets.planning.planner import rewritten_segments
from compaction_assets.store.local_files import remove_empty_dirs
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

# Exception classes (by name, so that neither py4j nor grpc needs importing) that only the engine or the
# machine raises: a connection, a process or memory that is gone.
ENGINE_EXCEPTION_TYPES = frozenset(
    {
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "ConnectionAbortedError",
        "BrokenPipeError",
        "TimeoutError",
        "MemoryError",
        "Py4JNetworkError",
        "SparkSetupError",
        "_InactiveRpcError",
        "RetriesExceeded",
    }
)

# Text that Spark, py4j or grpc put in the message of an engine fault, wherever it is wrapped.
ENGINE_MESSAGE_MARKERS = (
    "OutOfMemoryError",
    "SparkOutOfMemoryError",
    "GC overhead limit exceeded",
    "Java heap space",
    "ExecutorLostFailure",
    "Executor lost",
    "executor lost",
    "worker lost",
    "Worker lost",
    "SparkContext was shut down",
    "stopped SparkContext",
    "SparkContext has been shutdown",
    "Python worker exited unexpectedly",
    "Python worker failed to connect back",
    "Answer from Java side is empty",
    "Error while receiving",
    "Error while sending",
    "Connection refused",
    "Connection reset",
    "Broken pipe",
    "failed to connect to all addresses",
    "StatusCode.UNAVAILABLE",
    "UNAVAILABLE",
    "Socket closed",
    "DEADLINE_EXCEEDED",
    "INVALID_HANDLE.SESSION",
    "SESSION_CLOSED",
    "SESSION_NOT_FOUND",
    "Session not found",
)

# ... of which these may also be the log's own (one huge record runs a task, a worker or the driver out of
# memory): counted on the log when the engine answers afterwards, not only retried (the first found names
# the fault in the messages, which keep a Java error's first line only)
LOG_SUSPECT_MARKERS = (
    "OutOfMemoryError",
    "GC overhead limit exceeded",
    "ExecutorLostFailure",
    "Executor lost",
    "executor lost",
    "Python worker exited unexpectedly",
    "MemoryError",
)

# Three: one fault may be the machine's (a neighbour's memory), two in a row with other logs cleaned
# between may be chance; a third leaves the log's data as the cause, and retries stop there.
ENGINE_FAULT_STRIKES = 3

ENGINE_PROBE_SECONDS = 60.0  # a healthy engine answers `range(1)` in well under a second, even cold


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and every cause or context behind it, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_engine_fault(exc: BaseException) -> bool:
    """Whether `exc` (or anything behind it) is a fault of Spark or the machine, not of the log's data."""
    for link in _chain(exc):
        if any(cls.__name__ in ENGINE_EXCEPTION_TYPES for cls in type(link).__mro__):
            return True
        text = str(link)
        if any(marker in text for marker in ENGINE_MESSAGE_MARKERS):
            return True
    return False


def log_suspect_marker(exc: BaseException) -> str | None:
    """The marker of LOG_SUSPECT_MARKERS by which an engine fault (`is_engine_fault`) may also be caused by
    the log's data, or None."""
    texts = [f"{type(link).__name__}: {link}" for link in _chain(exc)]
    return next((marker for marker in LOG_SUSPECT_MARKERS if any(marker in text for text in texts)), None)


def engine_answers(session, timeout: float = ENGINE_PROBE_SECONDS) -> bool:
    """Whether the Spark session runs a trivial query within `timeout` seconds."""
    answered: list[bool] = []

    def probe() -> None:
        try:
            answered.append(session.range(1).count() == 1)
        except Exception:
            answered.append(False)

    thread = threading.Thread(target=probe, name="engine-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answered and answered[0])


# A full disk or quota, a read-only file system: the machine's fault whatever the log holds (by errno, or by
# the text a library or a Python worker keeps of the error).
READ_ONLY = "the store is read-only"
MACHINE_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up", errno.EROFS: READ_ONLY}
MACHINE_MESSAGE_MARKERS = {
    "No space left on device": "the disk is full",
    "Disk quota exceeded": "the disk quota is used up",
    "Read-only file system": READ_ONLY,
}


def machine_fault(exc: BaseException) -> str | None:
    """What is wrong with the machine when `exc` (or anything behind it) is its fault, else None."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.errno in MACHINE_ERRNOS:
            return MACHINE_ERRNOS[link.errno]
        text = str(link)
        for marker, what in MACHINE_MESSAGE_MARKERS.items():
            if marker in text:
                return what
    return None


def failed_cleaning(
    handle: LogHandle, m: Manifest, config: TopicConfig, u: int, session, exc: Exception
) -> CompactionError:
    """The error a failed cleaning raises: the engine's or the machine's fault unmarked, the log's marked
    (naming its file)."""
    if not isinstance(exc, CompactionError):
        if machine_fault(exc) is not None:
            return machine_error(handle, exc)
        if is_engine_fault(exc):
            return engine_fault(handle, exc, session)
        # a corrupt page? name the file (the cleaned range first)
        found = find_unreadable(handle, m, rewritten_segments(m, u)) or (
            strategy_of(config).needs_guard and find_unreadable(handle, m)
        )
        if found:
            exc = found
        elif session is not None and not engine_answers(session):
            return engine_error(handle, exc)
    return marked_error(handle, mark_uncleanable(handle, exc), one_line(exc))


def marked_error(handle: LogHandle, mark: Mark, reason: str) -> CompactionError:
    """The error of a cleaning that failed on the log's own data, as its mark went: said as it is (a mark
    that could not be written is not there), and not reported again when another run marked it first."""
    if mark is Mark.NOT_WRITTEN:
        return CompactionError(
            f"cleaning of log {handle.name!r} failed, the log is unchanged (and could not be marked "
            f"uncleanable): {reason}"
        )
    if mark is Mark.ALREADY:
        return AlreadyReportedError(
            f"cleaning of log {handle.name!r} failed, the log is unchanged; another run marked it uncleanable "
            f"first and reported the fault: {reason}"
        )
    return CompactionError(
        f"cleaning of log {handle.name!r} failed, the log is unchanged and marked uncleanable: {reason}"
    )


def machine_error(handle: LogHandle, exc: BaseException) -> EngineError:
    """The error of a cleaning stopped by the machine (a full disk, a read-only store): the log is not marked
    (its data is not at fault) and what the cleaning wrote is removed (`remove_cleaning_outputs`, by the
    engine); worth running again once the machine is fixed."""
    what = machine_fault(exc) or "the machine failed"
    then = "once the store is writable" if what == READ_ONLY else "once there is room"
    return EngineError(
        f"cleaning of log {handle.name!r} stopped: {what} ({one_line(exc)}); the log is unchanged and not "
        f"marked (the machine's fault, not the log's) and what the cleaning wrote is removed; run it again {then}"
    )


def remove_cleaning_outputs(handle: LogHandle) -> list[str]:
    """Delete what failed cleanings wrote and no manifest references: the files of `data/clean-*` work folders
    and of side tables. Called by the holder of the cleaning lock: only a cleaning writes there, so such a
    file is this cleaning's (or an earlier one's that was stopped); the log's other files are left to `gc`.
    Best effort: what cannot be listed or deleted now is `gc`'s later."""
    removed: list[str] = []
    try:
        keep = {handle.path(name) for name in handle.referenced()}  # files, and side tables (folders)
        candidates = [p for p in handle.st.list_files_recursive(handle.path("data")) if "/data/clean-" in p]
        candidates += handle.st.list_files_recursive(handle.path("side"))
        for path in candidates:
            if path in keep or any(path.startswith(k + "/") for k in keep):
                continue
            handle.st.delete(path)
            removed.append(path)
        if handle.st.local:
            remove_empty_dirs(handle.path("data"))
            remove_empty_dirs(handle.path("side"))
    except Exception:  # the cleaning's own error is the one to report; gc collects these files later
        pass
    return removed


def engine_fault(handle: LogHandle, exc: BaseException, session) -> CompactionError:
    """The error of a cleaning stopped by what reads as the engine's fault: unmarked when the engine is down
    or the fault cannot be the log's; else counted on the log, which is marked at ENGINE_FAULT_STRIKES.
    With no session started, the work that failed ran in this process, which is still up."""
    marker = log_suspect_marker(exc)
    if marker is None or (session is not None and not engine_answers(session)):
        return engine_error(handle, exc)
    previous = _previous_fault_ms(handle)
    counted = record_engine_fault(handle, exc, previous is not None and other_log_cleaned_since(handle, previous))
    if counted is None:
        return engine_error(handle, exc)
    if counted.strikes < ENGINE_FAULT_STRIKES:
        return SuspectEngineFault(
            f"cleaning of log {handle.name!r} stopped by an engine fault while the engine answers (strike "
            f"{counted.strikes} of {ENGINE_FAULT_STRIKES} against the log's data); the log is unchanged and "
            f"not marked yet: {marker}: {one_line(exc)}"
        )
    repeated = CompactionError(
        f"{counted.faults} cleanings in a row stopped by an engine fault while other logs of the store "
        f"cleaned in between: the fault is the log's own data's (a huge record?): {marker}: {one_line(exc)}"
    )
    return marked_error(handle, mark_uncleanable(handle, repeated), str(repeated))


def _previous_fault_ms(handle: LogHandle) -> int | None:
    """When the log's last counted engine fault was (None: none since its last cleaning)."""
    try:
        counted = handle.manifest().engine_faults
    except Exception:  # the store may be what failed
        return None
    return counted.last_ms if counted is not None else None


def other_log_cleaned_since(handle: LogHandle, since_ms: int) -> bool:
    """Whether another log of the store committed a cleaning after `since_ms` (wall clock). Read only at a
    log's second engine fault and later, and stops at the first log found."""
    for name in handle.store.logs():
        if name == handle.name:
            continue
        last = handle.store.log(name).manifest().last_cleaning
        if last is not None and last.finished_ms is not None and last.finished_ms > since_ms:
            return True
    return False


def engine_error(handle: LogHandle, exc: BaseException) -> EngineError:
    """The error of a cleaning stopped by the engine's fault: the log is not marked, to be run again later."""
    return EngineError(
        f"cleaning of log {handle.name!r} stopped by an engine fault; the log is unchanged "
        f"and not marked, run it again once Spark is back: {one_line(exc)}"
    )
