"""What one ingestion of a landing folder did (`landing.ingest`), and the document the CLI and Dagster show of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compaction_assets.ingest.route import IN_PROCESS

MTIME_TIMESTAMP_SOURCE = (
    "the objects' modification time for records without a timestamp field (landing.timestamp.field)"
)


@dataclass(frozen=True)
class IngestReport:
    """What one ingestion appended (files, records), and for a connector's layout how it found timestamps
    and offsets."""

    files: tuple[str, ...] = ()  # the files appended, in order (each piece of a Confluent group by name)
    records_appended: int = 0  # records committed to the log
    invalid_records_dropped: int = 0  # records refused and dropped (drop_invalid), not appended
    connector_layout: bool = False  # read as a connector's layout: the two figures below are reported
    timestamps_from_mtime: int = 0  # records without a timestamp field, stamped with their object's mtime
    offsets_inferred: tuple[str, ...] = ()  # first file of each unit whose offsets were inferred, not read
    set_aside: tuple[str, ...] = ()  # files passed over: set aside (quarantined) by an operator
    path: str = IN_PROCESS  # where the files were read and shaped: route.IN_PROCESS or route.SPARK
    why: str = ""  # the route's reason, in words (route.py)

    @property
    def files_ingested(self) -> int:
        """How many files were appended."""
        return len(self.files)

    @property
    def timestamp_source(self) -> str | None:
        """Where the timestamps of records without one came from; None when every record had its own."""
        return MTIME_TIMESTAMP_SOURCE if self.timestamps_from_mtime else None

    def as_document(self) -> dict[str, Any]:
        """The JSON `ingest` prints: where its files were read and shaped (`path`, `why`), the connector-only
        keys for a connector's layout, `timestamp_source` if used, `files_set_aside` if any."""
        document: dict[str, Any] = {
            "files_ingested": self.files_ingested,
            "records_appended": self.records_appended,
            "invalid_records_dropped": self.invalid_records_dropped,
            "files": list(self.files),
            "path": self.path,
            "why": self.why,
        }
        if self.connector_layout:
            document["timestamps_from_mtime"] = self.timestamps_from_mtime
            document["offsets_inferred"] = list(self.offsets_inferred)
            if self.timestamp_source is not None:
                document["timestamp_source"] = self.timestamp_source
        if self.set_aside:  # only when some are: a log without any reads as before
            document["files_set_aside"] = list(self.set_aside)
        return document
