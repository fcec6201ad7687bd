"""The log store resource: where logs live, where files land, and the topics file.

Every field left unset is resolved from `settings` (COMPACTION_STORE, COMPACTION_LANDING, ...) when a
run or a sensor tick uses it, never when the code location loads, so the location loads with nothing
set and a deployment can also bind fields to `dg.EnvVar(...)` (resolved at launch by Dagster).

A topic's configuration is the one stored with the store (the same one the CLI uses from any
directory). The deployment's topics file (`topics_file`, else COMPACTION_TOPICS; unset: none) is an input:
it is stored when its content changes (topics/applied_file.py), never a reason to stop a run or a tick.
"""

import os
from collections.abc import Callable

import dagster as dg
from pydantic import PrivateAttr

from compaction_assets import settings
from compaction_assets.cleaning.tuning import DEFAULT_TUNING, CleanerTuning
from compaction_assets.store.log_store import LogHandle, LogStore, wall_ms
from compaction_assets.store.names import parse_log_name
from compaction_assets.topics.applied_file import apply_when_changed
from compaction_assets.topics.config import TopicConfig, load_topics
from compaction_assets.topics.config_store import ConfigOrigin, ConfigStore, cleaned_logs_of, logged_topics

# The demo's topics file (the demo applies it to its store; a deployment names its own in COMPACTION_TOPICS)
REPO_TOPICS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "topics.yaml")


def default_topics_file() -> str | None:
    """COMPACTION_TOPICS; unset or blank: no file (the stored configuration alone)."""
    return settings.current().topics_file


def validate_topics_file() -> None:
    """Load the default topics file now, so that an invalid one fails the code location's load in one line."""
    path = default_topics_file()
    if path:
        load_topics(path)


class LogStoreResource(dg.ConfigurableResource):
    """The store of logs, the landing area and the topics file, as one Dagster resource."""

    root: str | None = None  # None: COMPACTION_STORE (var/store)
    landing: str | None = None  # None: COMPACTION_LANDING (var/landing)
    topics_file: str | None = None  # None: COMPACTION_TOPICS (unset: no file, the stored configuration alone)
    latest_state_root: str | None = None  # None: COMPACTION_LATEST_STATE (var/latest_state)
    lock_ttl_seconds: float | None = None  # None: COMPACTION_LOCK_TTL_SECONDS (300)
    # (store, file, mtime) this resource has applied its topics file for: a tick over 1,000 logs, or a batch
    # run, reads the file's record once, not once per log
    _applied: set = PrivateAttr(default_factory=set)

    @classmethod
    def from_env(cls) -> "LogStoreResource":
        """A resource with every field resolved from the environment now (the demo and tests)."""
        env = settings.current()
        topics = default_topics_file()
        if topics:
            load_topics(topics)
        return cls(
            root=env.store,
            landing=env.landing,
            topics_file=topics,
            latest_state_root=env.latest_state,
            lock_ttl_seconds=env.lock_ttl_seconds,
        )

    def store_location(self) -> str:
        """The store's location (a path or a URI)."""
        return self.root or settings.current().store

    def landing_area(self) -> str:
        """The landing area: <landing>/<topic>/partition=<p>/<files>."""
        return self.landing or settings.current().landing

    def latest_state_location(self) -> str:
        """Where the latest-state tables are written."""
        return self.latest_state_root or settings.current().latest_state

    @property
    def store(self) -> LogStore:
        """The log store."""
        ttl = self.lock_ttl_seconds if self.lock_ttl_seconds is not None else settings.current().lock_ttl_seconds
        return LogStore(self.store_location(), lock_ttl_s=ttl)

    def topics_path(self) -> str | None:
        """The deployment's topics file, by its absolute path (None: none)."""
        wanted = self.topics_file or default_topics_file()
        return os.path.abspath(wanted) if wanted else None

    def handle(self, log: str, *, must_exist: bool = False) -> LogHandle:
        """The log's handle; with `must_exist`, an UnknownLogError naming it when it does not exist."""
        return self.store.log(log, must_exist=must_exist)

    def config_for(self, log: str) -> TopicConfig:
        """The configuration stored in the store for the log's topic (the same one the CLI uses), after the
        deployment's topics file is stored if its content changed."""
        topic, _ = parse_log_name(log, "partition key")
        store = self.store
        self.apply_topics_file(store)
        return ConfigStore(store.storage).config_for(topic)

    def config_version(self, log: str) -> str:
        """The stored configuration version the log's topic runs with (`ConfigStore.version_mark`), for run keys."""
        topic, _ = parse_log_name(log, "partition key")
        store = self.store
        self.apply_topics_file(store)
        return ConfigStore(store.storage).version_mark(topic)

    def apply_topics_file(self, store: LogStore) -> None:
        """Store the deployment's topics file when its content changed since it was last applied from its path;
        once per file version and store for this resource (a tick, a run). A file that cannot be applied is a
        warning: the stored configuration runs."""
        path = self.topics_path()
        if path is None:
            return
        seen = (store.location, path, os.path.getmtime(path) if os.path.exists(path) else None)
        if seen in self._applied:
            return
        configs = ConfigStore(store.storage)
        result = apply_when_changed(
            configs,
            path,
            f"deployment: topics file {path} (COMPACTION_TOPICS)",
            wall_ms(),
            lambda: logged_topics(store),
            cleaned_logs_of(store),
        )
        self._applied.add(seen)
        if result.summary():
            logger = dg.get_dagster_logger()
            (logger.warning if result.refusal else logger.info)(result.summary())

    def config_per_topic(self) -> Callable[[str], TopicConfig]:
        """`config_for`, read once per topic: else a sensor's tick over many logs of few topics reads the same
        stored configuration and topics file for every log."""
        by_topic: dict[str, TopicConfig] = {}

        def config_for(log: str) -> TopicConfig:
            topic, _ = parse_log_name(log, "partition key")
            if topic not in by_topic:
                by_topic[topic] = self.config_for(log)
            return by_topic[topic]

        return config_for

    def cleaner_tuning(self) -> CleanerTuning:
        """The tuning of this resource's cleanings: the product's (a test's subclass hands its own)."""
        return DEFAULT_TUNING

    def config_source(self, log: str) -> ConfigOrigin:
        """The stored configuration's version and who set it (for the assets' metadata)."""
        topic, _ = parse_log_name(log, "partition key")
        return ConfigStore(self.store.storage).describe(topic)
