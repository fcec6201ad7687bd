"""A topic removed from a store (`compaction topic delete TOPIC`): its logs, its stored configuration, its
table (catalog entry and files), its logs' latest-state files, and the landing records that would
otherwise let the next ingestion re-create it from the files it had.

Landing files are the input, the store's to read and never to remove: they are left in place, and every one
present at the deletion is recorded as set aside with the topic (store/deleted_topics.py), so no ingestion
takes it in again; the output counts them, and those never ingested, so an operator knows what is left in
the landing area to remove. Kept here, above the layers it takes apart (store, topics, ingest, table).

Order: every log's leases first (a cleaning or an ingestion running refuses the whole deletion before
anything is removed, and none starts during it), then the landing record (a deletion stopped half-way
never lets its files back in), the table, the configuration, the latest-state files and the logs last;
running it again finishes a deletion that stopped."""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from compaction_assets.errors import CompactionError
from compaction_assets.ingest.connectors.layouts import recorded_names
from compaction_assets.ingest.landing import landing_logs
from compaction_assets.ingest.quarantine import Quarantine
from compaction_assets.store.deleted_topics import DeletedTopics
from compaction_assets.store.fs import Storage
from compaction_assets.store.log_store import LogStore
from compaction_assets.store.names import parse_log_name
from compaction_assets.table.catalog import identifier, locate, open_catalog
from compaction_assets.table.lifecycle import drop_table
from compaction_assets.topics.config_store import ConfigStore

LANDING_LEFT = (
    "left in place, and set aside: no ingestion takes these files in again (a file landed after the deletion "
    "creates the topic anew); remove them from the landing area when you wish"
)


@dataclass(frozen=True)
class LogRemoval:
    """One log of the topic: its files in the store and its visible bytes."""

    log: str
    files: int
    bytes: int


@dataclass(frozen=True)
class LandingLeft:
    """The topic's files in the landing area at the deletion (left in place, set aside)."""

    area: str
    files_left: int
    never_ingested: int
    names: dict[str, dict[str, int]] = field(default_factory=dict)  # {log: {name: mtime_ms}}, the record's


@dataclass(frozen=True)
class TopicDeletion:
    """What deleting a topic removes (`deleted` False: the plan, nothing removed yet) or removed."""

    topic: str
    logs: tuple[LogRemoval, ...]
    config_versions: int
    table: str | None  # its identifier; None: the topic has no table
    latest_state: tuple[str, ...]  # the logs' latest-state folders
    landing: LandingLeft
    deleted: bool = False

    @property
    def empty(self) -> bool:
        """Nothing of the topic in the store, its table or its landing area."""
        return not (self.logs or self.config_versions or self.table or self.latest_state or self.landing.files_left)

    def as_document(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "deleted": self.deleted,
            "logs": [{"log": r.log, "files": r.files, "bytes": r.bytes} for r in self.logs],
            "config_versions": self.config_versions,
            "table": self.table,
            "latest_state": list(self.latest_state),
            "landing": {
                "area": self.landing.area,
                "files_left": self.landing.files_left,
                "never_ingested": self.landing.never_ingested,
                "what_happens": LANDING_LEFT,
            },
        }


def plan_deletion(store: LogStore, topic: str, landing: str, latest_state: str) -> TopicDeletion:
    """What deleting `topic` would remove (nothing is changed)."""
    logs = sorted(log for log in store.logs() if parse_log_name(log)[0] == topic)
    removals = []
    for log in logs:
        handle = store.log(log)
        removals.append(LogRemoval(log, len(handle.st.list_files_recursive(handle.dir)), handle.manifest().total_size))
    location = locate(store.storage)
    ident = identifier(location, topic, ConfigStore(store.storage).effective(topic).get("table.name"))
    has_table = open_catalog(location).table_exists(ident)
    states = Storage.open(latest_state)
    return TopicDeletion(
        topic,
        tuple(removals),
        len(ConfigStore(store.storage).versions(topic)),
        ident if has_table else None,
        tuple(_shown(states, states.join(log)) for log in logs if states.is_dir(states.join(log))),
        _landing_left(store, topic, landing),
    )


def _shown(storage: Storage, path: str) -> str:
    """A path as the user names it: a local path, or the object's URI."""
    return path if storage.local else storage.uri(path)


def _landing_left(store: LogStore, topic: str, landing: str) -> LandingLeft:
    """The topic's files in the landing area, and how many of them its logs never took in."""
    found, _ = landing_logs(landing, store.storage)
    names: dict[str, dict[str, int]] = {}
    never = 0
    for log, src in found.items():
        if src.topic != topic:
            continue
        names[log] = {f.name: f.mtime_ms for f in src.files}
        handle = store.log(log)
        done = recorded_names(handle.manifest().ingested) if handle.exists() else set()
        never += sum(1 for f in src.files if f.name not in done)
    return LandingLeft(str(landing), sum(len(v) for v in names.values()), never, names)


def delete_topic(store: LogStore, plan: TopicDeletion, now_ms: int) -> TopicDeletion:
    """Remove what `plan` lists, in the order the module's docstring gives; the plan, marked deleted."""
    with ExitStack() as leases:
        handles = [store.log(r.log) for r in plan.logs]
        for handle in handles:  # refused, before anything is removed, while any log is being changed
            for kind in ("append", "clean"):
                leases.enter_context(handle.lock(kind, purpose=f"deletion of topic {plan.topic}"))
        DeletedTopics(store.storage).record(plan.topic, now_ms, plan.landing.names)
        if plan.table is not None:
            drop_table(store.storage, plan.topic, ConfigStore(store.storage).effective(plan.topic).get("table.name"))
        ConfigStore(store.storage).remove(plan.topic)
        for folder in plan.latest_state:
            Storage.open(folder).delete(Storage.open(folder).root)
        quarantine = Quarantine(store.storage)
        for handle in handles:  # the files set aside: the deletion's own record keeps them out now
            quarantine.forget_log(handle.name)
        for handle in handles:  # everything but the leases held: no writer starts on a half-removed log
            for entry in handle.st.list_dir(handle.dir):
                if entry != "_locks":
                    handle.st.delete(handle.st.join(handle.dir, entry))
    for handle in handles:
        handle.st.delete(handle.dir)
    return TopicDeletion(
        plan.topic, plan.logs, plan.config_versions, plan.table, plan.latest_state, plan.landing, deleted=True
    )


def refuse_unknown(store: LogStore, plan: TopicDeletion) -> None:
    """One line when the store knows nothing of the topic."""
    if plan.empty:
        raise CompactionError(f"no topic {plan.topic!r} in the store at {store.location}")
