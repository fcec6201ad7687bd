"""The connector layouts by `landing.format`: every question ingestion asks of a topic's landing format is
asked of the layout found here.

Adding a layout is one module with a `Connector` subclass (see connector.py; aiven.py is a short example)
and one line below, e.g. for a module `acme.py` holding `class Acme(Connector)`::

    from compaction_assets.ingest.connectors.acme import Acme
    ...
    CONNECTORS = {c.format: c for c in (Native(), Confluent(), Aiven(), Lenses(), Acme())}

(with the new value added to `LandingFormat` in topics/landing_settings.py).
"""

from __future__ import annotations

from compaction_assets.ingest.connectors.aiven import Aiven
from compaction_assets.ingest.connectors.confluent import Confluent
from compaction_assets.ingest.connectors.connector import Connector
from compaction_assets.ingest.connectors.layouts import LandedFile, PartitionSource
from compaction_assets.ingest.connectors.lenses import Lenses
from compaction_assets.ingest.connectors.native import Native
from compaction_assets.topics.landing_settings import LandingFormat

CONNECTORS: dict[LandingFormat, Connector] = {c.format: c for c in (Native(), Confluent(), Aiven(), Lenses())}


def connector_for(fmt: LandingFormat) -> Connector:
    """The layout of a landing format."""
    return CONNECTORS[fmt]


def layout_like(src: PartitionSource, f: LandedFile, fmt: LandingFormat) -> LandingFormat | None:
    """The other landing format whose connector puts and names its files as `f` is (None: none does): a file
    refused under `fmt` names it, for a topic whose `landing.format` was not set to its sink's."""
    return next((c.format for c in CONNECTORS.values() if c.format is not fmt and c.looks_like(src, f)), None)


def named_by_a_connector(name: str) -> bool:
    """Whether a file's name (its last part) is one a connector gives its files."""
    base = name.rsplit("/", 1)[-1]
    return any(c.file_name.match(base) for c in CONNECTORS.values() if c.file_name is not None)
