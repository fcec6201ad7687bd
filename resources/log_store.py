"""The log store resource: where logs live, where files land, and the topics file."""


import os
from functools import lru_cache

import dagster as dg

from compaction_assets import settings
from compaction_assets.log.config import TopicConfig, TopicsFile, load_topics
from compaction_assets.log.names import parse_log_name
from compaction_assets.log.store import LogHandle, LogStore


class LogStoreResource(dg.ConfigurableResource):
    root: str = "var/store"
    landing: str = "var/landing"
    topics_file: str | None = "topics.yaml"
    latest_state_root: str = "var/latest_state"
    lock_ttl_seconds: float = 300.0

    @classmethod
    def from_env(cls) -> "LogStoreResource":
        env = settings.current()
        return cls(root=env.store, landing=env.landing, topics_file=env.topics_file or settings.DEFAULT_TOPICS,
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
        topic, _ = parse_log_name(log, "partition key")
        return _config(*self._topics_key(), topic)


@lru_cache(maxsize=8)
def _topics(path: str | None, mtime: float) -> TopicsFile:
    return load_topics(path)  # re-read only when the file changes


@lru_cache(maxsize=4096)
def _config(path: str | None, mtime: float, topic: str) -> TopicConfig:
    return _topics(path, mtime).config_for(topic)
