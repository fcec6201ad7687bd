"""Finding each topic-partition's landed files, whichever connector wrote them, on a disk or an object store.

The four layouts are told apart by their paths, so one listing of the landing root finds them all:

- `<topic>/partition=<p>/<file>`: the product's own files, or Confluent's `<topic>+<p>+<start>.<ext>`
  (with `.keys.<ext>` / `.headers.<ext>` siblings); Confluent's tombstones are in `<topic>/tombstone/`.
- `<topic>-<p>-<start>[.<ext>]` at the root: Aiven's default file name template.
- `<topic>/<p>/<lastOffset>_<minTs>_<maxTs>.<ext>`: Lenses Stream Reactor.

How a partition's files are grouped into units and read is then the topic's `landing.format`: its connector
layout (registry.py) says it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from compaction_assets.errors import InvalidInputError, LogNameError
from compaction_assets.store.names import check_partition, check_topic

TOMBSTONE_DIR = "tombstone"  # Confluent's tombstone.encoded.partition default
CONFLUENT_NAME = re.compile(r"^(?P<topic>[^+/]+)\+(?P<p>\d+)\+(?P<start>\d+)(?P<view>\.keys|\.headers)?(?P<ext>\..*)?$")
AIVEN_NAME = re.compile(r"^(?P<topic>.+)-(?P<p>\d+)-(?P<start>\d+)(?P<ext>\..*)?$")
LENSES_NAME = re.compile(r"^(?P<last>\d+)(?:_(?P<min>\d+)_(?P<max>\d+))?(?P<ext>\..*)?$")


class Layout(str, Enum):
    """Where a partition's files are."""

    PARTITION_FOLDER = "partition-folder"  # native and Confluent
    FLAT = "flat"  # Aiven
    LENSES = "lenses"


@dataclass(frozen=True)
class LandedFile:
    """One object of the landing area."""

    path: str  # as the landing Storage names it
    name: str  # as the log's manifest records it once ingested
    mtime_ms: int
    size_bytes: int = 0  # as the listing gave it (the landing backlog's bytes)


@dataclass
class PartitionSource:
    """The landed files of one topic-partition (what `landing_logs` returns per log)."""

    storage: Any  # compaction_assets.store.fs.Storage of the landing area
    topic: str
    partition: int
    layout: Layout
    folder: str
    files: list[LandedFile] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The folder's last name (for messages)."""
        return self.folder.rstrip("/").rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return self.uri(self.folder)

    def uri(self, path: str) -> str:
        """A path of the landing area as messages name it (a local path, or the object's URI)."""
        return path if self.storage.local else self.storage.uri(path)

    def readable(self, landed: LandedFile) -> str:
        """The path to read `landed` at, once it is checked to be still inside the landing area: discovery
        ignores links, but a file or a folder above it may have been replaced by a link since (a local
        landing area; an object store has no links). InvalidInputError when it leads outside."""
        if not self.storage.local:
            return landed.path
        root = self.storage.root
        # the path as the root's own real path and the names below it give it (normpath: a partition folder given
        # alone finds Confluent's tombstones in its sibling folder, `../tombstone/`); a link anywhere differs
        expected = os.path.normpath(os.path.join(os.path.realpath(root), os.path.relpath(landed.path, root)))
        if os.path.realpath(landed.path) != expected:
            raise InvalidInputError(
                f"{landed.path}: leads outside the landing area {root} (it, or a folder above it, was replaced by "
                "a link since it was found); not read"
            )
        return landed.path


def open_landing(landing: Any):
    """The Storage of a landing root: a local folder or an object-store URI (s3://...)."""
    from compaction_assets.store.fs import Storage

    return Storage.open(str(landing))


def _walk(storage: Any, root: str) -> tuple[dict[str, list[tuple[str, int, int]]], set[str]]:
    """Files per folder (relative to root, "" for the root), each (name, mtime in ms, size), and every
    folder, to depth 3."""
    files: dict[str, list[tuple[str, int, int]]] = {}
    dirs: set[str] = set()
    if storage.local:
        if not os.path.isdir(root):
            return files, dirs
        for dirpath, dirnames, names in os.walk(root):
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            rel = "" if rel == "." else rel
            depth = 0 if not rel else rel.count("/") + 1
            dirnames[:] = [d for d in dirnames if depth < 2 and not os.path.islink(os.path.join(dirpath, d))]
            if rel:
                dirs.add(rel)
            for n in names:
                p = os.path.join(dirpath, n)
                if os.path.isfile(p) and not os.path.islink(p):
                    stat = os.stat(p)
                    files.setdefault(rel, []).append((n, int(stat.st_mtime * 1000), stat.st_size))
        return files, dirs
    prefix = root.rstrip("/") + "/"
    for path, mtime, size in storage.list_files_with_sizes(root):
        rel = path[len(prefix) :]
        parent, _, name = rel.rpartition("/")
        if parent.count("/") > 1:
            continue
        files.setdefault(parent, []).append((name, mtime, size))
        parts = parent.split("/") if parent else []
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    return files, dirs


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def discover(landing: Any) -> tuple[dict[str, PartitionSource], list[str]]:
    """Every log with landed files ({log name: source}) and the folders or names refused, with reasons."""
    storage = open_landing(landing)
    root = storage.root
    files, dirs = _walk(storage, root)
    found: dict[str, PartitionSource] = {}
    refused: list[str] = []

    def source(topic: str, p: int, layout: Layout, folder: str) -> PartitionSource:
        log = f"{topic}-{p}"
        if log not in found:
            found[log] = PartitionSource(storage, topic, p, layout, folder)
        return found[log]

    for rel in sorted(d for d in dirs if d.count("/") == 1):
        topic_name, sub = rel.split("/")
        if _hidden(topic_name) or _hidden(sub):
            continue
        folder = storage.join(rel)
        try:
            topic = check_topic(topic_name, "landing folder")
            if sub == TOMBSTONE_DIR:
                _add_tombstones(storage, topic, folder, files.get(rel, []), source)
                continue
            layout, p = _partition_folder(sub, folder)
        except LogNameError as exc:
            refused.append(str(exc))
            continue
        src = source(topic, p, layout, folder)
        src.files += [LandedFile(storage.join(rel, n), n, m, z) for n, m, z in files.get(rel, []) if not _hidden(n)]
    for name, mtime, size in files.get("", []):
        m = AIVEN_NAME.match(name)
        if m is None or _hidden(name):
            continue
        try:
            topic = check_topic(m["topic"], "landing file")
            p = check_partition(m["p"], f"landing file {name!r}")
        except LogNameError as exc:
            refused.append(str(exc))
            continue
        source(topic, p, Layout.FLAT, root).files.append(LandedFile(storage.join(name), name, mtime, size))
    for src in found.values():
        src.files.sort(key=lambda f: f.name)
    return dict(sorted(found.items())), refused


def _partition_folder(sub: str, folder: str) -> tuple[Layout, int]:
    """partition=<p> (native, Confluent) or <p> (Lenses); LogNameError for anything else."""
    if sub.isdigit():
        raw, layout = sub, Layout.LENSES
    elif sub.startswith("partition="):
        raw, layout = sub.split("=", 1)[1], Layout.PARTITION_FOLDER
    else:
        raise LogNameError(f"landing folder {folder!r} is not named partition=<p> (nor <p>, Lenses' layout)")
    p = check_partition(raw, f"landing folder {folder!r}")
    if str(p) != raw:  # partition=01 and partition=1 would be the same log
        raise LogNameError(f"landing folder {folder!r}: partition {raw!r} has leading zeros")
    return layout, p


def _add_tombstones(storage: Any, topic: str, folder: str, names: list[tuple[str, int, int]], source) -> None:
    """Confluent's tombstone files, each to its partition's source (named tombstone/<file>)."""
    for name, mtime, size in names:
        m = CONFLUENT_NAME.match(name)
        if m is None or _hidden(name) or m["topic"] != topic:
            continue
        p = int(m["p"])
        parent = f"{folder.rsplit('/', 1)[0]}/partition={p}"
        src = source(topic, p, Layout.PARTITION_FOLDER, parent)
        src.files.append(LandedFile(f"{folder}/{name}", f"{TOMBSTONE_DIR}/{name}", mtime, size))


def local_source(folder: Any, log_name: str) -> PartitionSource:
    """A source for a folder given directly (a partition folder, or Aiven's flat root), all its files."""
    from compaction_assets.store.names import parse_log_name

    storage = open_landing(folder)
    topic, p = parse_log_name(log_name)
    path = storage.root
    name = path.rstrip("/").rsplit("/", 1)[-1]
    layout = Layout.LENSES if name.isdigit() else Layout.PARTITION_FOLDER
    src = PartitionSource(storage, topic, p, layout, path)
    files, _ = _walk(storage, path)
    src.files = sorted(
        (LandedFile(storage.join(n), n, m, z) for n, m, z in files.get("", []) if not _hidden(n)),
        key=lambda f: f.name,
    )
    if layout is Layout.PARTITION_FOLDER and name.startswith("partition="):
        tomb = f"{path.rstrip('/').rsplit('/', 1)[0]}/{TOMBSTONE_DIR}"
        tfiles, _ = _walk(storage, tomb)

        def only_this(_topic: str, part: int, *_: Any) -> PartitionSource:
            return src if part == p else PartitionSource(storage, topic, part, layout, path)

        _add_tombstones(storage, topic, tomb, tfiles.get("", []), only_this)
    elif not name.startswith("partition=") and not name.isdigit():
        flat = [f for f in src.files if (m := AIVEN_NAME.match(f.name)) and m["topic"] == topic and int(m["p"]) == p]
        if flat:
            src.layout, src.files = Layout.FLAT, flat
    return src


# --- units: what is ingested at once (one file, or a Confluent value file with its keys and headers) -----


@dataclass(frozen=True)
class Unit:
    """Files ingested together, all or nothing; `start` orders units (an offset, or -1 by name)."""

    name: str  # the value (or only) file's recorded name
    files: tuple[LandedFile, ...]  # the value file first, then keys, then headers
    start: int
    tombstone: bool = False

    @property
    def main(self) -> LandedFile:
        """The file the unit is named after."""
        return self.files[0]


def recorded_names(ingested: Any) -> set[str]:
    """The file names a manifest's `ingested` entries cover (a Confluent unit records its files joined)."""
    out: set[str] = set()
    for entry in ingested:
        out.update(entry.split("|"))
    return out
