"""Errors the engine raises, each carrying a one-line, user-facing message, and `first_line`, the one way
the product quotes any error (its own or a library's) inside such a line, and `os_error_message`, the one
way it reports an operating system error. They mask secrets (compaction_assets/redaction.py): a message is
shown in outputs, logs and Dagster events."""

import errno

from compaction_assets.redaction import redact


class CompactionError(Exception):
    """Base class: a refusal or failure the user can act on (CLI prints it as one line)."""

    def __str__(self) -> str:
        # the message as every reader sees it (Dagster records str(exc)): a secret quoted in it is masked
        return redact(super().__str__())


class ConfigError(CompactionError):
    """An invalid topic configuration (SPEC §2)."""


class LogNameError(CompactionError):
    """A topic, partition or log name that SPEC §1 does not allow."""


class InvalidInputError(CompactionError):
    """Records refused at ingestion (null key, bad offset, bad timestamp, bad column).

    `row` is the index, in the input batch, of the refused record when there is one (so that a file
    reader can name its line)."""

    def __init__(self, message: str, row: int | None = None):
        super().__init__(message)
        self.row = row


class OffsetError(CompactionError):
    """An offset operation outside what SPEC §1 allows (e.g. log start beyond the log end)."""


class LockedError(CompactionError):
    """Another process holds the log's lock (a cleaning or an ingestion is running)."""


class ConflictError(CompactionError):
    """The log changed under a cleaning in a way the cleaning cannot rebase onto."""


class CorruptLogError(CompactionError):
    """A log's files or metadata cannot be read."""


class AlreadyReportedError(CompactionError):
    """A fault of a log's own data that another run found first: that run marked the log uncleanable and
    reported the fault, so this one fails without reporting it again (one alert per fault)."""


class UnknownLogError(CompactionError):
    """No such log in the store."""


class EngineError(CompactionError):
    """Spark or the machine failed (a session that cannot start, a connection, executor or worker lost, out
    of memory): the run fails and is worth retrying; the log is not marked (its data is not at fault)."""


class SuspectEngineFault(EngineError):
    """A fault that looks like the engine's (out of memory, a lost worker) in one log's cleaning while the
    engine answered afterwards: retried and not marked yet, but counted on the log (cleaning/faults.py),
    and the other logs of a fleet go on (the engine is up)."""


class SparkSetupError(EngineError):
    """Spark cannot start or be reached (a bad setting, an unreachable endpoint), naming the setting."""


class StorageError(CompactionError):
    """The store cannot be reached or used (wrong key, missing bucket, unreachable endpoint, bad object).

    The message names the store and never carries a credential."""


class StoreUnreachableError(StorageError):
    """The store did not answer (connection refused or reset, a timeout, its retries exhausted): a server that
    is down or restarting, which a later try may find back. Not a fault of any log."""


def transient(exc: BaseException) -> bool:
    """True for a failure a retry may not meet again: another holder of the log's lease, an engine fault, a
    store that did not answer. The others (a refusal, a corrupt log, a wrong key) fail the same way twice."""
    return isinstance(exc, (LockedError, EngineError, StoreUnreachableError))


class LeaseLostError(LockedError):
    """A writer's lease was taken over (it expired while the writer stalled): it must not commit."""


def first_line(exc: BaseException, limit: int | None = 300, blank: str | None = None) -> str:
    """The first line of an error's message (surrounding blanks removed), cut to `limit` characters (None: the
    whole line); for an error with no message, `blank` (None: the error's type name). Secrets are masked
    before the line is cut, so that a cut never leaves part of one."""
    lines = redact(str(exc)).strip().splitlines()
    line = lines[0] if lines else (type(exc).__name__ if blank is None else blank)
    return line if limit is None else line[:limit]


# What an operating system error means for an operator, by errno: the one-line form of an error a user's
# machine or input causes (a path, a permission, a full disk), never reported as "unexpected".
_OS_ERROR_MEANINGS = {
    errno.ENOSPC: "the disk is full (No space left on device); free space and run again",
    errno.EDQUOT: "the disk quota is used up (Disk quota exceeded); free space and run again",
    errno.EROFS: "read-only file system (nothing can be written there)",
    errno.EACCES: "permission denied (this user may not read or write it)",
    errno.EPERM: "operation not permitted (this user may not read or write it)",
    errno.ENOTDIR: "a part of this path is a file, not a folder",
}


def os_error_meaning(exc: OSError) -> str:
    """What an operating system error means, without the path."""
    return _OS_ERROR_MEANINGS.get(exc.errno or 0) or exc.strerror or first_line(exc, None)


def os_error_message(exc: OSError) -> str:
    """An operating system error in one line: the path it concerns and what it means."""
    what = os_error_meaning(exc)
    return f"{exc.filename}: {what}" if exc.filename else what
