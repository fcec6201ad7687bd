"""The product's own landing layout: `<topic>/partition=<p>/<files>` in the input files' record shape.

Its files are appended one at a time by landing.py through input_files.py, not shaped here: the layout only
says which files are input files, in name order.
"""

from __future__ import annotations

from compaction_assets.ingest.connectors.connector import Connector
from compaction_assets.ingest.connectors.layouts import TOMBSTONE_DIR, PartitionSource, Unit
from compaction_assets.ingest.formats.file_formats import NATIVE_FILES
from compaction_assets.topics.landing_settings import LandingFormat


class Native(Connector):
    """Input files of any name with an input file's extension, in name order."""

    format = LandingFormat.NATIVE
    native_records = True

    def units(self, src: PartitionSource) -> list[Unit]:
        """Each input file a unit (a Confluent tombstone folder's files are none of them)."""
        return [
            Unit(f.name, (f,), -1)
            for f in src.files
            if not f.name.startswith(TOMBSTONE_DIR + "/") and f.name.lower().endswith(NATIVE_FILES.suffixes)
        ]
