"""Errors the engine raises, each carrying a one-line, user-facing message, and `first_line`, the one way
the product quotes any error (its own or a library's) inside such a line. Both mask secrets
(compaction_assets/redaction.py): a message is shown in outputs, logs and Dagster events."""

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


class UnknownLogError(CompactionError):
    """No such log in the store."""


class EngineError(CompactionError):
    """Spark or the machine failed (a session that cannot start, a connection, executor or worker lost, out
    of memory): the run fails and is worth retrying; the log is not marked (its data is not at fault)."""


class SparkSetupError(EngineError):
    """Spark cannot start or be reached (a bad setting, an unreachable endpoint), naming the setting."""


class StorageError(CompactionError):
    """The store cannot be reached or used (wrong key, missing bucket, unreachable endpoint, bad object).

    The message names the store and never carries a credential."""


class LeaseLostError(LockedError):
    """A writer's lease was taken over (it expired while the writer stalled): it must not commit."""


def first_line(exc: BaseException, limit: int | None = 300, blank: str | None = None) -> str:
    """The first line of an error's message (surrounding blanks removed), cut to `limit` characters (None: the
    whole line); for an error with no message, `blank` (None: the error's type name). Secrets are masked
    before the line is cut, so that a cut never leaves part of one."""
    lines = redact(str(exc)).strip().splitlines()
    line = lines[0] if lines else (type(exc).__name__ if blank is None else blank)
    return line if limit is None else line[:limit]
