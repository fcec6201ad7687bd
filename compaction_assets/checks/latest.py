"""The checks' own model of a log's latest state (SPEC §7.5), and its comparison with a table's rows.

Per key, the winner by the model's rank (checks/model.py) over every visible record; a key whose winner
is a tombstone, or loses by rank to a remembered delete, is absent. Nothing here comes from `cleaning/`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from compaction_assets.checks.model import LogView, Rec, rank, read_log, read_remembered
from compaction_assets.store.log_store import LogHandle
from compaction_assets.store.manifest import Manifest
from compaction_assets.topics.config import TopicConfig

SHOWN = 5  # differing keys named in a failed comparison


@dataclass(frozen=True)
class StateComparison:
    """A table's rows of one log against the model: what differs."""

    expected: int
    found: int
    missing: list[bytes] = field(default_factory=list)  # keys the model has and the table lacks
    extra: list[bytes] = field(default_factory=list)  # keys the table has and the model does not
    different: list[bytes] = field(default_factory=list)  # keys whose offset, value or timestamp differ

    @property
    def passed(self) -> bool:
        """True when the table holds exactly the model's rows."""
        return not (self.missing or self.extra or self.different)

    def describe(self) -> str:
        """One line: the counts, and a few differing keys."""
        if self.passed:
            return f"the table holds the model's latest state: {self.expected} keys"
        shown = lambda keys: ", ".join(repr(k) for k in keys[:SHOWN])  # noqa: E731
        return (
            f"{len(self.missing)} keys missing ({shown(self.missing)}), {len(self.extra)} extra "
            f"({shown(self.extra)}), {len(self.different)} different ({shown(self.different)}) "
            f"of {self.expected} expected"
        )


def model_latest_state(
    handle: LogHandle, config: TopicConfig, manifest: Manifest, view: LogView | None = None
) -> dict[bytes, Rec]:
    """Each present key's winning record, by the model (from `view`, the version read already, when it is
    this manifest's)."""
    winners: dict[bytes, Rec] = {}
    records = view if view is not None and view.version == manifest.version else read_log(handle, manifest)
    for r in records.records():
        w = winners.get(r.key)
        if w is None or rank(r, config) > rank(w, config):
            winners[r.key] = r
    best: dict[bytes, tuple] = {}
    for m in read_remembered(handle, manifest, config):
        if m.key not in best or m.rank > best[m.key]:
            best[m.key] = m.rank
    return {k: r for k, r in winners.items() if not r.tombstone and not (k in best and rank(r, config) < best[k])}


def compare(rows: list[dict], expected: dict[bytes, Rec]) -> StateComparison:
    """Table rows ({key, value, offset, timestamp}) against the model's latest state."""
    found = {bytes(r["key"]): r for r in rows}
    missing = sorted(k for k in expected if k not in found)
    extra = sorted(k for k in found if k not in expected)
    different = sorted(
        k
        for k, r in found.items()
        if k in expected
        and (r["offset"], r["value"], r["timestamp"]) != (expected[k].offset, expected[k].value, expected[k].timestamp)
    )
    return StateComparison(len(expected), len(found), missing, extra, different)
