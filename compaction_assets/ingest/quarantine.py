"""Landing files set aside (quarantined): a file that cannot be ingested is recorded in the store, with the
reason the operator gave, and every ingestion of its log passes over it until it is released.

The landing area is left as it is: a sink's bucket is often written by the connector alone, and a file set
aside must stay there for whoever repairs it. The record is the store's, one JSON file per log that has
files set aside (`<store>/_landing/quarantine/<log>.json`, gone once the last is released): a sensor
learns which logs have any from one listing. A change is a conditional write (compare and swap), so two
operators setting files of one log aside at once both keep theirs. A file ingested with others as one
unit (a Confluent value file with its keys and headers) is set aside with them.
"""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import asdict, dataclass
from typing import Any

from compaction_assets.errors import CompactionError

QUARANTINE_DIR = ("_landing", "quarantine")  # under the store's root: `_` keeps it out of the store's logs
ATTEMPTS = 20  # conditional writes lost to a concurrent change before giving up (each re-reads first)


@dataclass(frozen=True)
class SetAside:
    """One landing file set aside: its name (as the log's manifest would record it), why, when and by whom,
    and every file of its unit (itself first)."""

    file: str
    reason: str
    at_ms: int
    by: str  # user@host of the command (or the Dagster run) that set it aside
    files: tuple[str, ...]

    def as_document(self) -> dict[str, Any]:
        """As the CLI prints it."""
        return {**asdict(self), "files": list(self.files)}


def operator() -> str:
    """Who sets a file aside: the user and the host."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name for this uid (a container)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


class Quarantine:
    """The files set aside, per log, in a store (its `Storage`)."""

    def __init__(self, storage: Any):
        self.storage = storage

    def _path(self, log: str) -> str:
        return self.storage.join(*QUARANTINE_DIR, f"{log}.json")

    def forget_log(self, log: str) -> None:
        """Drop the record of the log's files set aside (its topic was deleted: nothing of it is ingested)."""
        self.storage.delete(self._path(log))

    def logs(self) -> list[str]:
        """The logs with files set aside (one listing)."""
        names = self.storage.list_dir(self.storage.join(*QUARANTINE_DIR))
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json") and not n.startswith("."))

    def of(self, log: str) -> list[SetAside]:
        """The log's files set aside, in the order they were."""
        return self._read(log)[0]

    def names(self, log: str) -> frozenset[str]:
        """Every file name set aside for the log (each unit's files)."""
        return frozenset(name for entry in self.of(log) for name in entry.files)

    def add(self, log: str, entry: SetAside) -> SetAside:
        """Set a file aside; refused (one line) when it already is."""

        def change(entries: list[SetAside]) -> list[SetAside]:
            for held in entries:
                if entry.file in held.files:
                    raise CompactionError(f"{log}: {entry.file} is already set aside ({held.reason})")
            return [*entries, entry]

        self._change(log, change)
        return entry

    def remove(self, log: str, file: str) -> SetAside:
        """Put a file back (it is pending again); refused (one line) when it is not set aside."""
        found: list[SetAside] = []

        def change(entries: list[SetAside]) -> list[SetAside]:
            found[:] = [e for e in entries if file in e.files]
            if not found:
                raise CompactionError(f"{log}: {file} is not set aside")
            return [e for e in entries if file not in e.files]

        self._change(log, change)
        return found[0]

    def _read(self, log: str) -> tuple[list[SetAside], Any]:
        """The log's entries and the record's version (None: no record)."""
        try:
            data, version = self.storage.read_versioned(self._path(log))
        except FileNotFoundError:
            return [], None
        try:
            doc = json.loads(data)
            entries = [SetAside(**{**e, "files": tuple(e["files"])}) for e in doc["set_aside"]]
        except (ValueError, KeyError, TypeError) as exc:
            raise CompactionError(f"{self._path(log)}: not a record of files set aside ({exc})") from None
        return entries, version

    def _change(self, log: str, change) -> None:
        """Apply `change` to the log's entries with a conditional write, again on a concurrent change."""
        for _ in range(ATTEMPTS):
            entries, version = self._read(log)
            new = change(entries)
            path = self._path(log)
            if not new:  # the last one released: no record (a sensor's listing stays short)
                if version is None or self.storage.delete_if_unchanged(path, version):
                    return
                continue
            data = json.dumps({"log": log, "set_aside": [e.as_document() for e in new]}, indent=1).encode()
            if version is None:
                self.storage.makedirs(self.storage.join(*QUARANTINE_DIR))
                written = self.storage.create_versioned(path, data)
            else:
                written = self.storage.replace_if_unchanged(path, data, version)
            if written is not None:
                return
        raise CompactionError(f"{log}: the files set aside changed {ATTEMPTS} times while this change was made")
