"""Topic, partition and log names (SPEC §1). Names become paths, so they are checked everywhere."""

from __future__ import annotations

import re

from compaction_assets.errors import LogNameError

_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_LOG_RE = re.compile(r"(?P<topic>.+)-(?P<partition>[0-9]+)")
# Names the store's configuration keeps for itself (topics/config_store.py: `<store>/_topics/_defaults/` holds the
# store-wide defaults): a topic of that name would read and change the defaults of every other topic.
RESERVED_TOPICS = frozenset({"_defaults"})


def check_topic(topic: object, source: str = "topic name") -> str:
    """Refuse a topic name Kafka would refuse (SPEC §1), naming where it came from."""
    if not isinstance(topic, str) or not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
        raise LogNameError(
            f"{source} {topic!r} is not a valid Kafka topic name "
            "(1-249 characters of a-z A-Z 0-9 . _ -, not '.' or '..')"
        )
    if topic in RESERVED_TOPICS:
        raise LogNameError(
            f"{source} {topic!r} is reserved: the store keeps its configuration defaults under "
            "that name (choose another topic name)"
        )
    return topic


def check_partition(partition: object, source: str = "partition") -> int:
    """Refuse a partition that is not a non-negative integer without leading zeros."""
    if isinstance(partition, bool):
        raise LogNameError(f"{source} {partition!r} is not a non-negative integer")
    if isinstance(partition, int):
        value = partition
    elif isinstance(partition, str) and re.fullmatch(r"[0-9]+", partition):
        value = int(partition)
    else:
        raise LogNameError(f"{source} {partition!r} is not a non-negative integer")
    if value < 0 or value > 2**31 - 1:
        raise LogNameError(f"{source} {partition!r} is out of range (0 to 2147483647)")
    return value


def log_name(topic: str, partition: int | str) -> str:
    """The log's name, `<topic>-<partition>`."""
    return f"{check_topic(topic)}-{check_partition(partition)}"


def parse_log_name(name: object, source: str = "log name") -> tuple[str, int]:
    """Split `<topic>-<partition>` and validate both parts; refuse anything else."""
    if not isinstance(name, str):
        raise LogNameError(f"{source} {name!r} is not a string")
    match = _LOG_RE.fullmatch(name)
    if not match:
        raise LogNameError(f"{source} {name!r} is not of the form <topic>-<partition>")
    topic = check_topic(match.group("topic"), f"{source} {name!r}: topic")
    partition = check_partition(match.group("partition"), f"{source} {name!r}: partition")
    if str(partition) != match.group("partition"):
        raise LogNameError(f"{source} {name!r}: partition has leading zeros")
    return topic, partition


def sanitize_topic(text: str) -> str:
    """Replace every character a topic may not contain with '_' (used by the conformance runner)."""
    cleaned = re.sub(r"[^a-zA-Z0-9._-]", "_", text)[:249] or "_"
    return "_" + cleaned if cleaned in (".", "..") or cleaned in RESERVED_TOPICS else cleaned
