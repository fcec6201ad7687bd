"""The log store resource: where logs live, where files land, and the topics file."""


import os
from functools import lru_cache

import dagster as dg

from compaction_assets import settings
from compaction_assets.log.config import ConfigStore, TopicConfig, TopicsFile, cleaned_logs_of, load_topics
from compaction_assets.log.names import parse_log_name
from compaction_assets.log.store import LogHandle, LogStore, wall_ms


REPO_TOPICS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "topics.yaml")


class LogStoreResource(dg.ConfigurableResource):
    root: str = "var/store"
    landing: str = "var/landing"
    # Checked against the store's configuration (never read from the current directory implicitly).
    topics_file: str | None = None
    latest_state_root: str = "var/latest_state"
    lock_ttl_seconds: float = 300.0

    @classmethod
    def from_env(cls) -> "LogStoreResource":
        env = settings.current()
        # COMPACTION_TOPICS, else the repository's topics.yaml (by its absolute path, never the current
        # directory's). Loaded here so that an invalid file fails the code location's load, in one line.
        topics = env.topics_file or (REPO_TOPICS if os.path.exists(REPO_TOPICS) else None)
        if topics:
            load_topics(topics)
        return cls(root=env.store, landing=env.landing, topics_file=topics,
                   latest_state_root=env.latest_state, lock_ttl_seconds=env.lock_ttl_seconds)

    @property
    def store(self) -> LogStore:
        return LogStore(self.root, lock_ttl_s=self.lock_ttl_seconds)

    def _topics_key(self) -> tuple[str | None, float]:
        path = self.topics_file if self.topics_file and os.path.exists(self.topics_file) else None
        return path, (os.path.getmtime(path) if path else 0.0)

    @property
    def topics(self) -> TopicsFile:
        return _topics(*self._topics_key())

    def handle(self, log: str) -> LogHandle:
        return self.store.log(log)

    def config_for(self, log: str) -> TopicConfig:
        """The configuration stored in the store for the log's topic (the same one the CLI uses); the
        topics file is checked against it and stored for a topic the store does not know yet."""
        topic, _ = parse_log_name(log, "partition key")
        path, mtime = self._topics_key()
        store = self.store
        return ConfigStore(store.storage).config_for(
            topic, _topics(path, mtime) if path else None, f"topics file {path!r}", cleaned_logs_of(store), wall_ms())

    def config_source(self, log: str) -> dict:
        """The stored configuration's version and who set it (for the assets' metadata)."""
        topic, _ = parse_log_name(log, "partition key")
        return ConfigStore(self.store.storage).describe(topic)


@lru_cache(maxsize=8)
def _topics(path: str | None, mtime: float) -> TopicsFile:
    return load_topics(path)  # re-read only when the file changes


