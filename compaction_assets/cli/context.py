"""What every command of the operator command line shares: its context (store, topics, time, Spark), its
output (results as JSON on stdout, progress on stderr) and its exit codes. How the commands are declared
and parsed is cli/__init__.py."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from compaction_assets import settings
from compaction_assets.errors import CompactionError
from compaction_assets.store.log_store import LogHandle, LogStore, wall_ms
from compaction_assets.store.names import check_topic
from compaction_assets.topics.applied_file import apply_when_changed
from compaction_assets.topics.config import TopicConfig, load_topics
from compaction_assets.topics.config_store import ConfigStore, cleaned_logs_of, logged_topics


def settle_imports() -> None:
    """Leave what this process's imports made out of every later garbage collection (`gc.freeze`)."""
    import gc

    # a command's process lives for one command, and its modules, classes and functions (numpy's,
    # pyarrow's, the cleaner's: a few hundred thousand objects) until it exits; frozen, no collection
    # walks them again, nor does the interpreter's last one at exit
    gc.freeze()


def _progress(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _progress_sink() -> Callable[[str], None]:
    """Progress lines as `_progress` writes them, from a standard logger of this command: the engine and
    the cleaner, in their threads, write to it without calling back into the CLI."""
    logger = logging.Logger("compaction.progress", logging.INFO)  # not registered: no other handlers
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    return logger.info


def _emit(obj: Any) -> None:
    print(json.dumps(obj, indent=2, default=str))


# Commands that may create a store; every other one refuses a store that does not exist (rather than
# listing it as empty). `landing`: a file is set aside before anything of its log could be ingested.
CREATING_COMMANDS = ("append", "ingest", "config", "landing")
EXIT_PIPE_CLOSED = 141  # the reader of stdout went away; what a shell reports for a process killed by SIGPIPE
EXIT_TRANSIENT = 75  # sysexits' EX_TEMPFAIL: an engine fault (Spark down, a lost executor); running again helps


class Context:
    """One command's store, topics file, time and (started on first use) Spark session."""

    def __init__(self, args: SimpleNamespace):
        self.args = args
        # read once for the command, here, not while parsing: a bad variable is a one-line error
        self.env = env = settings.current()
        self.store = LogStore(args.store or env.store, lock_ttl_s=env.lock_ttl_seconds)
        for name in _named_logs(args):
            self.store.log(name)  # names become paths: refused before anything is read or written
        if getattr(args, "topic", None) is not None:
            check_topic(args.topic, "topic")
        self.landing = getattr(args, "landing", None) or env.landing
        if self.store.is_a_file():
            raise CompactionError(
                f"no store at {self.store.location}: it is a file, not a folder (--store or COMPACTION_STORE "
                "names the store's folder)"
            )
        if args.command not in CREATING_COMMANDS and not self.store.exists():
            raise CompactionError(
                f"no store at {self.store.location}: it does not exist "
                "(--store or COMPACTION_STORE names it; `append` or `ingest` creates one)"
            )
        self.configs = ConfigStore(self.store.storage)
        # A topics file named with --topics or COMPACTION_TOPICS is the deployment's: stored when its content
        # changed since it was last applied (topics/applied_file.py), never used for one run, never a reason
        # to refuse. Nothing is read from the current directory implicitly.
        self.topics_path = args.topics or env.topics_file
        if self.topics_path:
            load_topics(self.topics_path)  # a bad file named here is a one-line error before anything runs
        self.now = args.now if args.now is not None else wall_ms()
        self._spark = None
        self.progress = _progress_sink()
        self.apply_topics_file()

    def apply_topics_file(self) -> None:
        """Store the named topics file if its content changed (every command but `config`, which is how an
        operator changes the stored configuration by hand; `config apply` applies a file explicitly). A file
        that cannot be applied is said on stderr, and the command runs with the stored configuration."""
        if not self.topics_path or self.args.command == "config":
            return
        result = apply_when_changed(
            self.configs,
            self.topics_path,
            f"topics file {os.path.abspath(self.topics_path)} (--topics or COMPACTION_TOPICS)",
            wall_ms(),
            lambda: logged_topics(self.store) if self.store.exists() else [],
            cleaned_logs_of(self.store),
        )
        if result.summary():
            _progress(result.summary())

    def config(self, log: str) -> TopicConfig:
        """The stored configuration of the log's topic."""
        return self.topic_config(self.store.log(log).topic)

    def topic_config(self, topic: str) -> TopicConfig:
        """The stored configuration of a topic."""
        return self.configs.config_for(topic)

    def handle(self, log: str, must_exist: bool = True) -> LogHandle:
        """The log's handle (refused when it does not exist, unless `must_exist` is False)."""
        return self.store.log(log, must_exist=must_exist)

    @property
    def tables_follow(self) -> bool:
        """Whether the topics' tables follow what this command changes: tables on (COMPACTION_TABLES) and not
        turned off by the command's --no-table."""
        return self.env.tables.enabled and not getattr(self.args, "no_table", False)

    @property
    def spark(self):
        """The Spark session, started on first use."""
        if self._spark is None:
            _progress("starting Spark")
            from compaction_assets.spark import get_spark

            self._spark = get_spark()
        return self._spark


def _named_logs(args: SimpleNamespace) -> list[str]:
    """The logs a command names (LOG, or LOG...)."""
    names = [args.log] if getattr(args, "log", None) is not None else []
    return names + list(getattr(args, "logs", None) or [])
